// Lazy R1's correction of D's Adam against StyleGAN2's formula, and one of its updates
// against Adam worked out by hand with the corrected constants.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/optim.h"
#include "models/gan.h"
#include "models/wrapped_gan.h"

using namespace tandem;
using namespace tandem::models;

namespace {

// StyleGAN2's training loop, transcribed: mb_ratio = reg_interval / (reg_interval + 1);
// lr *= mb_ratio; betas = [b ** mb_ratio for b in betas].
optim::AdamOptions stylegan2_formula(double lr, std::array<double, 2> betas, int64_t reg_interval) {
  const double mb_ratio = double(reg_interval) / double(reg_interval + 1);
  return {.lr = lr * mb_ratio, .betas = {std::pow(betas[0], mb_ratio), std::pow(betas[1], mb_ratio)}};
}

WrappedGanOptions alone(bool correction) {
  WrappedGanOptions options;
  options.wrap = WrapMode::none;
  options.lr = 2e-4;
  options.betas = {0.5, 0.999};
  options.lazy_r1_correction = correction;
  return options;
}

}  // namespace

TEST_CASE("lazy_regularization_adam scales lr by c and raises betas to c, c = k / (k + 1)",
          "[gan][lazy-r1]") {
  for (int64_t k : {2, 4, 16}) {
    const optim::AdamOptions got = lazy_regularization_adam({.lr = 2e-4, .betas = {0.5, 0.999}}, k);
    const optim::AdamOptions want = stylegan2_formula(2e-4, {0.5, 0.999}, k);
    CHECK(got.lr == Approx(want.lr).epsilon(1e-15));
    CHECK(got.betas[0] == Approx(want.betas[0]).epsilon(1e-15));
    CHECK(got.betas[1] == Approx(want.betas[1]).epsilon(1e-15));
    CHECK(got.eps == 1e-8);
  }
  // k = 4 by hand: c = 0.8, lr 1.6e-4, 0.5^0.8 = 0.574349..., 0.999^0.8 = 0.9992, roughly.
  const optim::AdamOptions four = lazy_regularization_adam({.lr = 2e-4, .betas = {0.5, 0.999}}, 4);
  CHECK(four.lr == Approx(1.6e-4));
  CHECK(four.betas[0] == Approx(0.5743491775));
  CHECK(four.betas[1] == Approx(0.9991996797));
  const optim::AdamOptions one = lazy_regularization_adam({.lr = 2e-4, .betas = {0.5, 0.999}}, 1);
  CHECK((one.lr == 2e-4 && one.betas[0] == 0.5 && one.betas[1] == 0.999));
  CHECK_THROWS_WITH(lazy_regularization_adam({}, 0), Catch::Contains("must be at least 1"));
}

TEST_CASE("with lazy R1, WrappedGan gives D's Adam the corrected constants unless told not to",
          "[gan][lazy-r1]") {
  const GanConfig lazy{.model = "ring8-mlp", .objective = {.r1_gamma = 1.0, .r1_every = 4}};
  const optim::AdamOptions want = stylegan2_formula(2e-4, {0.5, 0.999}, 4);
  WrappedGan corrected(make_gan(lazy), nullptr, alone(true));
  CHECK(corrected.opt_d().options().lr == Approx(want.lr).epsilon(1e-15));
  CHECK(corrected.opt_d().lr() == Approx(want.lr).epsilon(1e-15));
  CHECK(corrected.opt_d().options().betas[0] == Approx(want.betas[0]).epsilon(1e-15));
  CHECK(corrected.opt_d().options().betas[1] == Approx(want.betas[1]).epsilon(1e-15));
  CHECK(corrected.opt_g().options().lr == 2e-4);  // G takes no penalty steps
  CHECK(corrected.opt_g().options().betas[0] == 0.5);

  WrappedGan plain(make_gan(lazy), nullptr, alone(false));
  CHECK(plain.opt_d().options().lr == 2e-4);
  CHECK(plain.opt_d().options().betas[1] == 0.999);
  // R1 in every D loss (r1_every 1) takes no extra updates, so nothing to correct.
  WrappedGan every_step(make_gan({.model = "ring8-mlp", .objective = {.r1_gamma = 1.0, .r1_every = 1}}),
                        nullptr, alone(true));
  CHECK(every_step.opt_d().options().lr == 2e-4);
}

TEST_CASE("two steps of D's corrected Adam equal Adam computed by hand with lr c and betas^c",
          "[gan][lazy-r1]") {
  const int64_t k = 4;
  WrappedGan wrapped(make_gan({.model = "ring8-mlp", .objective = {.r1_gamma = 1.0, .r1_every = k}}), nullptr,
                     alone(true));
  optim::Adam& adam = wrapped.opt_d();
  const double c = 0.8, lr = 2e-4 * c, b1 = std::pow(0.5, c), b2 = std::pow(0.999, c), eps = 1e-8;
  Variable p = wrapped.model().discriminator->parameters().front();
  const std::vector<double> p0 = p.data().to_vector();
  const std::vector<double> g1 = {0.3, -1.5, 2e-3, 7.0}, g2 = {-0.2, -0.1, 4e-3, 1.0};
  // Two steps on the first parameter alone (the others have no gradient and stay).
  for (Variable other : adam.params()) other.set_grad(Tensor());
  std::vector<double> want = p0, m(p0.size(), 0.0), v(p0.size(), 0.0);
  for (int step = 1; step <= 2; ++step) {
    const std::vector<double>& g = step == 1 ? g1 : g2;
    std::vector<double> grad(p0.size());
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = g[i % g.size()];
    p.set_grad(Tensor::from_values(p.data().shape(), grad));
    adam.step();
    for (size_t i = 0; i < grad.size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * grad[i];
      v[i] = b2 * v[i] + (1 - b2) * grad[i] * grad[i];
      const double m_hat = m[i] / (1 - std::pow(b1, step)), v_hat = v[i] / (1 - std::pow(b2, step));
      want[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
  const std::vector<double> got = p.data().to_vector();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-8).epsilon(1e-6));
  // The update is not the uncorrected one: at step 2 the betas matter.
  double moved = 0;
  for (size_t i = 0; i < got.size(); ++i) moved = std::max(moved, std::fabs(got[i] - p0[i]));
  CHECK(moved > 1e-4);
}
