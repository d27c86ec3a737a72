// The gradient penalties against closed forms: per-sample gradient norms, packs of rows,
// the penalty's gradient with respect to the critic's weights (second order), and the
// refusal of a critic with batch norm.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/precision.h"
#include "models/gradient_penalty.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using namespace tandem::models;
using tandem::testing::bitwise_equal;

namespace {

Tensor values(const Shape& shape, const std::vector<double>& v) { return Tensor::from_values(shape, v); }

// numel values magnitude x (1 + 0.5 sin(k + phase)): fixed, varied, never zero.
Tensor wavy(const Shape& shape, double magnitude, double phase, double sign_every = 0) {
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::vector<double> v(static_cast<size_t>(numel));
  for (size_t k = 0; k < v.size(); ++k) {
    const bool negative = sign_every > 0 && std::fmod(static_cast<double>(k), sign_every) == 0;
    v[k] = (negative ? -magnitude : magnitude) * (1.0 + 0.5 * std::sin(static_cast<double>(k) + phase));
  }
  return values(shape, v);
}

// A critic of bias-free linear layers with leaky ReLU between: weights[l] is [out, in].
Variable chain_critic(const std::vector<Variable>& weights, const Variable& x, bool activations) {
  Variable h = x;
  for (size_t l = 0; l < weights.size(); ++l) {
    h = matmul(h, weights[l], false, true);
    if (activations && l + 1 < weights.size()) h = leaky_relu(h, 0.2);
  }
  return h;
}

}  // namespace

TEST_CASE("interpolate mixes each sample by its own coefficient into a fresh leaf", "[penalty]") {
  Tensor real = values({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor fake = values({2, 3}, {0, 0, 0, 10, 10, 10});
  Variable x = interpolate(real, fake, values({2}, {0.25, 1.0}));
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK(x.data().to_vector() == std::vector<double>{0.25, 0.5, 0.75, 4, 5, 6});
  CHECK_THROWS_WITH(interpolate(real, fake, values({3}, {0, 0, 0})),
                    Catch::Contains("3 coefficients for 2 samples"));
}

TEST_CASE("the penalties take each sample's own gradient norm", "[penalty]") {
  // D(x)_i = sum_j x_ij^2: grad_x D(x)_i = 2 x_i, so ||.|| = 2 ||x_i||, different per sample.
  Variable x(values({3, 2}, {3, 4, 0, 1, 0.3, 0.4}), true);
  Variable d = sum(square(x), 1);
  const double n0 = 10, n1 = 2, n2 = 1;
  CHECK(r1_penalty(d, x).item() == Approx((n0 * n0 + n1 * n1 + n2 * n2) / 3));
  Variable d2 = sum(square(x), 1);
  CHECK(wgan_gp_penalty(d2, x).item() ==
        Approx((std::pow(n0 - 1, 2) + std::pow(n1 - 1, 2) + std::pow(n2 - 1, 2)) / 3));
  CHECK_FALSE(x.grad().defined());  // the inner gradient touches no .grad
}

TEST_CASE("a critic that judges packs of rows gets one norm per pack", "[penalty]") {
  // Packs of 2 rows of 2: D(pack) = w . (4 values). Per pack ||grad|| = ||w|| = 5 (3, 4, 0, 0);
  // taken per row it would be 5 for one row and 0 for the other.
  Variable w(values({1, 4}, {3, 4, 0, 0}), true);
  Variable x(values({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}), true);
  Variable d = matmul(reshape(x, {2, 4}), w, false, true);
  CHECK(wgan_gp_penalty(d, x).item() == Approx(16.0));  // (5 - 1)^2
}

TEST_CASE("the penalties' gradients reach the critic's weights through the second-order graph", "[penalty]") {
  // A linear critic D(x) = x W^T + b: grad_x D = W for every sample, so
  // R1 = ||W||^2 with dR1/dW = 2 W, and GP = (||W|| - 1)^2 with dGP/dW = 2 (||W|| - 1) W / ||W||.
  // The bias does not reach the penalty.
  const std::vector<double> w_values{1, 2, 2};  // ||W|| = 3
  Variable x(values({4, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}), true);
  for (bool gp : {false, true}) {
    INFO((gp ? "WGAN-GP" : "R1"));
    Variable w(values({1, 3}, w_values), true);
    Variable b(values({1}, {0.5}), true);
    Variable penalty = gp ? wgan_gp_penalty(linear(x, w, b), x) : r1_penalty(linear(x, w, b), x);
    CHECK(penalty.item() == Approx(gp ? 4.0 : 9.0));
    penalty.backward();
    auto g = w.grad().to_vector();
    for (size_t k = 0; k < 3; ++k)
      CHECK(g[k] == Approx(gp ? 2.0 * 2.0 * w_values[k] / 3.0 : 2.0 * w_values[k]));
    CHECK_FALSE(b.grad().defined());
  }
}

TEST_CASE("a critic with batch norm is refused by name", "[penalty][errors]") {
  Generator gen(1);
  nn::Sequential critic(std::make_shared<nn::Linear>(4, 4, true, gen), std::make_shared<nn::BatchNorm1d>(4));
  CHECK_THROWS_WITH(
      check_critic_for_penalty(critic, "toy", "--loss wgan-gp"),
      Catch::Contains("--loss wgan-gp: the critic (discriminator) of 'toy' has batch norm (1)") &&
          Catch::Contains("WGAN-GP forbids batch norm in the critic"));
  nn::Sequential plain(std::make_shared<nn::Linear>(4, 1, true, gen));
  CHECK_NOTHROW(check_critic_for_penalty(plain, "toy", "--loss wgan-gp"));
}

TEST_CASE("a penalty's inner gradient under a loss scale is the unscaled one, bitwise, in float32",
          "[penalty][precision]") {
  // Scaling by a power of two and back commutes with every float32 rounding where nothing
  // underflows or overflows: the penalty and its gradients must come out bit for bit.
  const std::vector<Shape> shapes = {{8, 6}, {8, 8}, {1, 8}};
  Variable x0(wavy({5, 6}, 1.0, 0.3, 3), false);
  for (bool gp : {false, true}) {
    INFO((gp ? "WGAN-GP" : "R1"));
    std::vector<Tensor> grads[2];
    Tensor penalties[2];
    for (int scaled = 0; scaled < 2; ++scaled) {
      std::vector<Variable> w;
      for (size_t l = 0; l < shapes.size(); ++l) w.emplace_back(wavy(shapes[l], 0.4, double(l), 4), true);
      Variable x(x0.data(), true);
      const double inner_scale = scaled ? 65536.0 : 1.0;
      Variable d = chain_critic(w, x, true);
      Variable p = gp ? wgan_gp_penalty(d, x, inner_scale) : r1_penalty(d, x, inner_scale);
      p.backward();
      penalties[scaled] = p.data();
      for (const Variable& v : w) grads[scaled].push_back(v.grad());
    }
    CHECK(penalties[0].item() > 0);
    CHECK(bitwise_equal(penalties[0], penalties[1]));
    for (size_t l = 0; l < shapes.size(); ++l) {
      INFO("layer " << l);
      CHECK(bitwise_equal(grads[0][l], grads[1][l]));
    }
  }
  Variable x(x0.data(), true);
  CHECK_THROWS_WITH(r1_penalty(sum(square(x), 1), x, 0.0),
                    Catch::Contains("gradient penalty: inner scale 0 must be positive and finite"));
}

TEST_CASE("in float16 the scaled inner gradient keeps what the unscaled one flushes to zero",
          "[penalty][precision]") {
  // Four bias-free linear layers of width 4 with weights near 1e-3: sum(D)'s gradient
  // shrinks by about 4e-3 per layer on its way back, 1e-3, 4e-6, 1.6e-8, and float16 (whose
  // smallest subnormal is 6e-8) rounds the last to zero where the next layer reads it. Under
  // a scale of 2^14 the same gradients are 16, 0.066 and 2.6e-4, all float16 normals. (2^16,
  // GradScaler's first scale, is itself infinite in float16: the first step would back off.)
  const std::vector<Shape> shapes = {{4, 4}, {4, 4}, {4, 4}, {1, 4}};
  std::vector<Variable> w;
  for (size_t l = 0; l < shapes.size(); ++l) w.emplace_back(wavy(shapes[l], 1e-3, double(l)), false);
  const Tensor x0 = wavy({3, 4}, 1.0, 0.7);
  auto penalty = [&](DType compute, double inner_scale) {
    const PrecisionScope precision(compute);
    Variable x(x0, true);
    return r1_penalty(chain_critic(w, x, false), x, inner_scale).item();
  };
  const double reference = penalty(DType::f32, 1.0);
  const double unscaled = penalty(DType::f16, 1.0);
  const double scaled = penalty(DType::f16, 16384.0);
  INFO("float32 " << reference << ", float16 unscaled " << unscaled << ", scaled " << scaled);
  REQUIRE(reference > 0);
  // Five float16 roundings of weights and gradients, 2^-11 each, twice over in the square.
  CHECK(std::abs(scaled - reference) <= 0.01 * reference);
  CHECK(std::abs(unscaled - reference) >= 0.5 * reference);
}
