// The gradient penalties against closed forms: per-sample gradient norms, packs of rows,
// the penalty's gradient with respect to the critic's weights (second order), and the
// refusal of a critic with batch norm.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "models/gradient_penalty.h"

using namespace tandem;
using namespace tandem::models;

namespace {

Tensor values(const Shape& shape, const std::vector<double>& v) { return Tensor::from_values(shape, v); }

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
