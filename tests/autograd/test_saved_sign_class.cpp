// What relu, leaky_relu and bias_activation keep for backward (ops_activation.cpp,
// ops_bias_activation.cpp): the sign class of the tensor their backward reads, so the float
// tensor is freed once the op has run forward unless something else holds it; the
// gradients are bitwise those of the kernels on the float tensor.
#include <catch2/catch.hpp>
#include <memory>

#include "autograd/ops.h"
#include "kernels/activation.h"
#include "kernels/bias_activation.h"
#include "kernels/elementwise.h"
#include "runtime/rng.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using kernels::Activation;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f32);
  fill_uniform(t, -2.0, 2.0, gen);
  return t;
}

}  // namespace

TEST_CASE("relu and leaky_relu free their input after forward and keep its gradient exact",
          "[autograd][sign-class]") {
  const Tensor x0 = random_f32({2, 3, 4, 4}, 21);
  for (bool leaky : {false, true}) {
    INFO((leaky ? "leaky_relu" : "relu"));
    Variable x(x0.clone(), true);
    std::weak_ptr<Storage> input;
    Variable y;
    {
      Variable h = scale(x, 2.0);  // an activation whose own backward keeps nothing
      input = h.data().storage();
      y = leaky ? leaky_relu(h, 0.2) : relu(h);
    }
    CHECK(input.expired());
    sum(y).backward();
    const Tensor h0 = kernels::scale(x0, 2.0), ones = Tensor::ones(x0.shape());
    const Tensor gh = leaky ? kernels::leaky_relu_backward(ones, h0, 0.2) : kernels::relu_backward(ones, h0);
    CHECK(bitwise_equal(x.grad(), kernels::scale(gh, 2.0)));
  }
}

TEST_CASE(
    "bias_activation keeps the sign class of its output for relu and leaky_relu, and its input only to "
    "recompute tanh and sigmoid",
    "[autograd][fused][sign-class]") {
  const Tensor x0 = random_f32({2, 3, 4, 4}, 22), b0 = random_f32({3}, 23);
  struct Case {
    Activation act;
    double gain, clamp;
    bool keeps_output, keeps_input;
  };
  for (const Case& c : {Case{Activation::relu, 1.0, kernels::kNoClamp, false, false},
                        Case{Activation::leaky_relu, 1.0, kernels::kNoClamp, false, false},
                        Case{Activation::leaky_relu, 1.41, 0.5, true, false},  // StyleGAN's: y's magnitude
                        Case{Activation::tanh, 1.0, kernels::kNoClamp, true, true}}) {
    INFO(kernels::activation_name(c.act) << " gain " << c.gain << " clamp " << c.clamp);
    Variable x(x0.clone(), true), b(b0.clone(), true);
    std::weak_ptr<Storage> input, output;
    Variable loss;
    Tensor y0;
    {
      Variable h = scale(x, 2.0);
      input = h.data().storage();
      Variable y = bias_activation(h, b, c.act, 0.2, c.gain, c.clamp);
      output = y.data().storage();
      y0 = y.data().clone();
      loss = sum(y);  // keeps nothing of y
    }
    CHECK(input.expired() == !c.keeps_input);
    CHECK(output.expired() == !c.keeps_output);
    loss.backward();
    const kernels::BiasActivationGrads want =
        kernels::bias_activation_backward(Tensor::ones(x0.shape()), y0, c.act, 0.2, c.gain, c.clamp);
    CHECK(bitwise_equal(x.grad(), kernels::scale(want.x, 2.0)));
    CHECK(bitwise_equal(b.grad(), want.bias));
  }
}
