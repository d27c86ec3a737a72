// kernels/sign_class.h: relu's, leaky_relu's and the fused bias_activation's backward from
// the sign class equal, bit for bit, the backward from the float tensor, on the values where
// a sign is easy to lose (-0, subnormals, infinities, NaN).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/activation.h"
#include "kernels/bias_activation.h"
#include "kernels/sign_class.h"
#include "runtime/rng.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using kernels::Activation;
using tandem::testing::bitwise_equal;

namespace {

// [2, 3, 4]: per dtype's edge values, then random ones.
Tensor edge_values(DType dtype) {
  const double tiny = dtype == DType::f32 ? std::numeric_limits<float>::denorm_min()
                                          : std::numeric_limits<double>::denorm_min();
  std::vector<double> v = {0.0,      -0.0,      tiny,         -tiny, 1e-30, -1e-30,
                           INFINITY, -INFINITY, std::nan(""), 3.5,   -2.25, 1.0};
  Generator gen(5);
  Tensor noise = Tensor::empty({12}, DType::f64);
  fill_uniform(noise, -2.0, 2.0, gen);
  for (double x : noise.to_vector()) v.push_back(x);
  return Tensor::from_values({2, 3, 4}, v, dtype);
}

// Equal bytes, where a NaN only has to be a NaN (its payload is not kept).
bool equal_up_to_nan_payload(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  for (size_t i = 0; i < av.size(); ++i) {
    if (std::isnan(av[i]) != std::isnan(bv[i])) return false;
    if (!std::isnan(av[i]) && std::signbit(av[i]) != std::signbit(bv[i])) return false;
    if (!std::isnan(av[i]) && av[i] != bv[i]) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("sign_class is 1 above zero, 0 at or below it, 2 for NaN", "[kernels][activation][sign-class]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor x = edge_values(dtype);
    const Tensor c = kernels::sign_class(x);
    REQUIRE(c.dtype() == DType::u8);
    REQUIRE(c.shape() == x.shape());
    const std::vector<double> xv = x.to_vector(), cv = c.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      INFO("element " << i << ": " << xv[i]);
      CHECK(cv[i] == (std::isnan(xv[i]) ? 2.0 : xv[i] > 0 ? 1.0 : 0.0));
    }
  }
}

TEST_CASE("relu and leaky_relu backward from the sign class equal the backward from the input",
          "[kernels][activation][sign-class]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    const Tensor x = edge_values(dtype);
    Generator gen(6);
    Tensor g = Tensor::empty(x.shape(), dtype);
    fill_uniform(g, -1.0, 1.0, gen);
    const Tensor c = kernels::sign_class(x);
    CHECK(equal_up_to_nan_payload(kernels::relu_backward(g, c), kernels::relu_backward(g, x)));
    CHECK(equal_up_to_nan_payload(kernels::leaky_relu_backward(g, c, 0.2),
                                  kernels::leaky_relu_backward(g, x, 0.2)));
    // No NaN: the bytes themselves.
    const Tensor finite = Tensor::from_values({4}, {0.0, -0.0, 2.0, -3.0}, dtype);
    const Tensor gf = Tensor::from_values({4}, {-1.5, 2.0, -0.0, 0.75}, dtype);
    CHECK(bitwise_equal(kernels::leaky_relu_backward(gf, kernels::sign_class(finite), 0.2),
                        kernels::leaky_relu_backward(gf, finite, 0.2)));
  }
}

TEST_CASE("bias_activation backward from the output's sign class equals the backward from the output",
          "[kernels][activation][fused][sign-class]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (Activation act : {Activation::relu, Activation::leaky_relu}) {
      INFO(dtype_name(dtype) << " " << kernels::activation_name(act));
      const Tensor x = edge_values(dtype);
      const Tensor bias = Tensor::from_values({3}, {0.0, -0.0, 0.5}, dtype);
      const Tensor y = kernels::bias_activation(x, bias, act, 0.2);
      Generator gen(7);
      Tensor g = Tensor::empty(x.shape(), dtype);
      fill_uniform(g, -1.0, 1.0, gen);
      const kernels::BiasActivationGrads from_y = kernels::bias_activation_backward(g, y, act, 0.2);
      const kernels::BiasActivationGrads from_class =
          kernels::bias_activation_backward(g, kernels::sign_class(y), act, 0.2);
      CHECK(equal_up_to_nan_payload(from_class.x, from_y.x));
      CHECK(equal_up_to_nan_payload(from_class.bias, from_y.bias));
    }
  }
}

TEST_CASE("a sign class where the backward needs more than a sign is an error naming the op",
          "[kernels][activation][sign-class][errors]") {
  const Tensor x = edge_values(DType::f32), g = Tensor::ones({2, 3, 4});
  const Tensor c = kernels::sign_class(x);
  CHECK_THROWS_WITH(kernels::tanh_backward(g, c), Catch::Contains("tanh_backward"));
  CHECK_THROWS_WITH(
      kernels::bias_activation_backward(g, c, Activation::tanh),
      Catch::Contains("bias_activation_backward: the output's sign class stands for it only for "
                      "relu and leaky_relu without gain or clamp, not for tanh"));
  CHECK_THROWS_WITH(kernels::bias_activation_backward(g, c, Activation::leaky_relu, 0.2, 1.41),
                    Catch::Contains("not for leaky_relu with gain 1.41"));
  CHECK_THROWS_WITH(kernels::bias_activation_backward(g, c, Activation::relu, 0.0, 1.0, 256.0),
                    Catch::Contains("clamp 256"));
  CHECK_THROWS_WITH(kernels::relu_backward(g, kernels::sign_class(Tensor::zeros({2, 3}))),
                    Catch::Contains("relu_backward"));
}
