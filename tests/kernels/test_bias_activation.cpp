// The fused bias + activation against add_bias, the activation and bias_grad run one after
// the other: bitwise equal on the CPU, forward and backward, for every activation; with
// StyleGAN's gain and clamp, against scale and clamp after the unfused activation.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/activation.h"
#include "kernels/bias_activation.h"
#include "kernels/elementwise.h"
#include "runtime/rng.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using kernels::Activation;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_uniform(t, -2.0, 2.0, gen);
  return t.to(dtype);
}

// Largest |a - b| relative to max(1, |b|), elementwise.
double worst_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector(), bv = b.to_vector();
  double worst = av.size() == bv.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < av.size() && i < bv.size(); ++i)
    worst = std::max(worst, std::abs(av[i] - bv[i]) / std::max(1.0, std::abs(bv[i])));
  return worst;
}

// The unfused path: y = act(add_bias(x, b)); grad_x = act_backward(g, saved), grad_b = bias_grad.
Tensor unfused_forward(const Tensor& x, const Tensor& b, Activation act, double slope) {
  Tensor z = kernels::add_bias(x, b);
  switch (act) {
    case Activation::none:
      return z;
    case Activation::relu:
      return kernels::relu(z);
    case Activation::leaky_relu:
      return kernels::leaky_relu(z, slope);
    case Activation::tanh:
      return kernels::tanh(z);
    case Activation::sigmoid:
      return kernels::sigmoid(z);
  }
  return z;
}

Tensor unfused_grad_z(const Tensor& g, const Tensor& x, const Tensor& b, Activation act, double slope) {
  Tensor z = kernels::add_bias(x, b);
  switch (act) {
    case Activation::none:
      return g;
    case Activation::relu:
      return kernels::relu_backward(g, z);
    case Activation::leaky_relu:
      return kernels::leaky_relu_backward(g, z, slope);
    case Activation::tanh:
      return kernels::tanh_backward(g, kernels::tanh(z));
    case Activation::sigmoid:
      return kernels::sigmoid_backward(g, kernels::sigmoid(z));
  }
  return g;
}

const Activation kActivations[] = {Activation::none, Activation::relu, Activation::leaky_relu,
                                   Activation::tanh, Activation::sigmoid};

}  // namespace

TEST_CASE("bias_activation equals add_bias then the activation, bit for bit, both ways",
          "[kernels][activation][fused]") {
  // NCHW convolution outputs, [N, F] linear outputs, one-pixel maps.
  const Shape shapes[] = {{4, 3, 5, 5}, {6, 17}, {2, 8, 1, 1}, {1, 1}};
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64})
    for (const Shape& shape : shapes)
      for (Activation act : kActivations) {
        INFO(kernels::activation_name(act) << " " << shape_str(shape) << " " << dtype_name(dt));
        Tensor x = random_tensor(shape, dt, seed++);
        Tensor b = random_tensor({shape[1]}, dt, seed++);
        Tensor g = random_tensor(shape, dt, seed++);
        Tensor y = kernels::bias_activation(x, b, act, 0.2);
        CHECK(bitwise_equal(y, unfused_forward(x, b, act, 0.2)));
        kernels::BiasActivationGrads grads = kernels::bias_activation_backward(g, y, act, 0.2);
        Tensor gz = unfused_grad_z(g, x, b, act, 0.2);
        CHECK(bitwise_equal(grads.x, gz));
        CHECK(bitwise_equal(grads.bias, kernels::bias_grad(gz)));
      }
}

TEST_CASE(
    "bias_activation's relu and leaky_relu backward from the output keep 0, -0, NaN and Inf as the "
    "unfused ones",
    "[kernels][activation][fused]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = INFINITY;
  Tensor x = Tensor::from_values({1, 7}, {0.0, -0.0, nan, inf, -inf, 1e-310, -1e-310}, DType::f64);
  Tensor b = Tensor::zeros({7}, DType::f64);
  Tensor g = Tensor::from_values({1, 7}, {1, 2, 3, 4, 5, 6, 7}, DType::f64);
  for (Activation act : {Activation::relu, Activation::leaky_relu}) {
    INFO(kernels::activation_name(act));
    Tensor y = kernels::bias_activation(x, b, act, 0.2);
    CHECK(bitwise_equal(y, unfused_forward(x, b, act, 0.2)));
    CHECK(bitwise_equal(kernels::bias_activation_backward(g, y, act, 0.2).x,
                        unfused_grad_z(g, x, b, act, 0.2)));
  }
}

TEST_CASE("bias_activation's gain and clamp equal scale then clamp after the unfused activation, both ways",
          "[kernels][activation][fused]") {
  const double gain = 1.7, clamp = 0.9;  // inputs in [-2, 2]: some outputs clamp, some do not
  const Shape shape{3, 4, 5, 5};
  uint64_t seed = 100;
  for (DType dt : {DType::f32, DType::f64})
    for (Activation act : kActivations) {
      INFO(kernels::activation_name(act) << " " << dtype_name(dt));
      Tensor x = random_tensor(shape, dt, seed++);
      Tensor b = random_tensor({shape[1]}, dt, seed++);
      Tensor g = random_tensor(shape, dt, seed++);
      const Tensor a = unfused_forward(x, b, act, 0.2);
      const Tensor want = kernels::clamp(kernels::scale(a, gain), -clamp, clamp);
      const Tensor y = kernels::bias_activation(x, b, act, 0.2, gain, clamp);
      CHECK(bitwise_equal(y, want));
      CHECK(bitwise_equal(kernels::bias_activation(x, b, act, 0.2, gain), kernels::scale(a, gain)));
      CHECK(bitwise_equal(kernels::bias_activation(x, b, act, 0.2, 1.0, clamp),
                          kernels::clamp(a, -clamp, clamp)));
      // The unfused gradient: the clamp passes it where |y| < clamp, then the gain, then the
      // activation's backward.
      const Tensor pass =
          kernels::compare(kernels::abs(want), Tensor::full(shape, clamp, dt), kernels::Comparison::less);
      double passed = 0;
      for (double v : pass.to_vector()) passed += v;
      CHECK(passed > 0);
      CHECK(passed < static_cast<double>(pass.numel()));
      const Tensor gz = unfused_grad_z(kernels::scale(kernels::mul(g, pass), gain), x, b, act, 0.2);
      const kernels::BiasActivationGrads grads =
          kernels::bias_activation_backward(g, y, act, 0.2, gain, clamp);
      const double tol = dt == DType::f64 ? 1e-14 : 1e-5;  // act' read from y / gain rounds
      CHECK(worst_error(grads.x, gz) < tol);
      CHECK(worst_error(grads.bias, kernels::bias_grad(gz)) < tol * 100);
    }
}

TEST_CASE("bias_activation names what is wrong", "[kernels][activation][fused][errors]") {
  Tensor x = Tensor::zeros({2, 3, 4, 4});
  CHECK_THROWS_WITH(
      kernels::bias_activation(x, Tensor::zeros({4}), Activation::relu),
      Catch::Contains("bias_activation: bias [4] does not match channels (axis 1) of input [2, 3, 4, 4]"));
  CHECK_THROWS_WITH(kernels::bias_activation(x, Tensor::zeros({3}), Activation::leaky_relu, 0.0),
                    Catch::Contains("bias_activation: leaky_relu needs a finite slope > 0"));
  CHECK_THROWS_WITH(kernels::bias_activation(x, Tensor::zeros({3}, DType::f64), Activation::tanh),
                    Catch::Contains("bias_activation"));
  CHECK_THROWS_WITH(kernels::bias_activation_backward(x, Tensor::zeros({2, 3}), Activation::tanh),
                    Catch::Contains("bias_activation_backward"));
  CHECK_THROWS_WITH(kernels::bias_activation(x, Tensor::zeros({3}), Activation::relu, 0.0, 0.0),
                    Catch::Contains("bias_activation: the gain must be finite and > 0"));
  CHECK_THROWS_WITH(kernels::bias_activation(x, Tensor::zeros({3}), Activation::relu, 0.0, 1.0, std::nan("")),
                    Catch::Contains("bias_activation: the clamp is NaN"));
  CHECK_THROWS_WITH(kernels::bias_activation_backward(x, x, Activation::tanh, 0.0, -2.0),
                    Catch::Contains("bias_activation_backward: the gain must be finite and > 0") &&
                        Catch::Contains("got -2"));
}
