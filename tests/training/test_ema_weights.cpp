// The moving average of G's weights against its closed form, worked out by hand, and the
// swap that draws samples from it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "models/training/ema_weights.h"

using namespace tandem;
using namespace tandem::training;

namespace {

Variable parameter(const Shape& shape, double value) { return Variable(Tensor::full(shape, value), true); }

}  // namespace

TEST_CASE("the decay ramps as (t + 1) / (t + 10) up to its maximum", "[ema]") {
  CHECK(EmaWeights::decay_at(0.999, 0) == Approx(0.1));
  CHECK(EmaWeights::decay_at(0.999, 1) == Approx(2.0 / 11.0));
  CHECK(EmaWeights::decay_at(0.999, 90) == Approx(0.91));
  CHECK(EmaWeights::decay_at(0.999, 100000) == Approx(0.999));  // 100001 / 100010 > 0.999
  CHECK(EmaWeights::decay_at(0.2, 2) == Approx(0.2));           // 3 / 12 = 0.25, capped
}

TEST_CASE("after k updates toward fixed weights the average is the closed form", "[ema]") {
  // Starting from the weights' initial value a, with the weights then held at p, each
  // update moves the average a fraction (1 - d_t) of the way to p:
  //   average_k = p + (a - p) * d_0 * d_1 * ... * d_(k-1).
  // With max decay 0.2: d_0 = 1/10, d_1 = 2/11, then 3/12 and 4/13 are capped at 0.2.
  const double a = 1.0, p = 3.0;
  Variable w = parameter({2, 3}, a), b = parameter({3}, -a);
  EmaWeights ema({w, b}, 0.2);
  REQUIRE(ema.tensors().size() == 2);
  w.data().fill_(p);
  b.data().fill_(-p);
  for (int64_t t = 0; t < 4; ++t) ema.update(t);
  const double product = 0.1 * (2.0 / 11.0) * 0.2 * 0.2;  // 0.000727...
  for (double v : ema.tensors()[0].to_vector()) CHECK(v == Approx(p + (a - p) * product).epsilon(1e-6));
  for (double v : ema.tensors()[1].to_vector()) CHECK(v == Approx(-p - (a - p) * product).epsilon(1e-6));
  CHECK(ema.tensors()[0].shape() == Shape{2, 3});
}

TEST_CASE("an update weighs the current weights, not the initial ones", "[ema]") {
  // Two updates with the weights at 10 then 20, from 0: d_0 = 0.1, d_1 = 2/11.
  //   after t = 0: 0.1 * 0 + 0.9 * 10 = 9;  after t = 1: (2/11) * 9 + (9/11) * 20 = 198/11 = 18.
  Variable w = parameter({4}, 0.0);
  EmaWeights ema({w}, 0.999);
  w.data().fill_(10.0);
  ema.update(0);
  for (double v : ema.tensors()[0].to_vector()) CHECK(v == Approx(9.0));
  w.data().fill_(20.0);
  ema.update(1);
  for (double v : ema.tensors()[0].to_vector()) CHECK(v == Approx(18.0));
}

TEST_CASE("the average is put in place for a scope and the live weights come back bitwise", "[ema]") {
  Variable w = parameter({5}, 0.0);
  EmaWeights ema({w}, 0.5);
  w.data().fill_(1.0 / 3.0);  // not exactly representable: the restore must be a copy, not arithmetic
  ema.update(20);             // decay 0.5: average 1/6
  const std::vector<double> live = w.data().to_vector(), average = ema.tensors()[0].to_vector();
  REQUIRE(live != average);
  {
    ScopedAverage scope(ema);
    CHECK(w.data().to_vector() == average);
  }
  CHECK(w.data().to_vector() == live);
}

TEST_CASE("a maximum decay of 0 turns the average off", "[ema]") {
  Variable w = parameter({3}, 2.0);
  EmaWeights ema({w}, 0.0);
  CHECK(ema.tensors().empty());
  w.data().fill_(5.0);
  ema.update(0);
  {
    ScopedAverage scope(ema);
    for (double v : w.data().to_vector()) CHECK(v == 5.0);
  }
  for (double v : w.data().to_vector()) CHECK(v == 5.0);
}

namespace {

// StyleGAN's training loop, transcribed: images counted over all ranks.
//   ema_nimg = ema_kimg * 1000
//   if ema_rampup is not None: ema_nimg = min(ema_nimg, cur_nimg * ema_rampup)
//   ema_beta = 0.5 ** (batch_size / max(ema_nimg, 1e-8))
double stylegan_beta(double ema_kimg, double ema_rampup, double batch_size, double cur_nimg) {
  double ema_nimg = ema_kimg * 1000;
  if (ema_rampup > 0) ema_nimg = std::min(ema_nimg, cur_nimg * ema_rampup);
  return std::pow(0.5, batch_size / std::max(ema_nimg, 1e-8));
}

}  // namespace

TEST_CASE("a half-life in images gives StyleGAN's decay at every iteration, ramp-up included", "[ema]") {
  // Global batch 64, half-life 10 kimg, ramp-up 0.05: the half-life is 0.05 * images seen until
  // that reaches 10000 images (iteration 3125), then 10000.
  const EmaHalfLife h{.kimg = 10, .rampup = 0.05, .global_batch = 64};
  EmaWeights ema({parameter({2}, 0.0)}, h);
  CHECK(ema.decay(0) == 0.0);  // no image seen yet: the average becomes the weights
  for (int64_t t : {1, 2, 3, 10, 100, 3124, 3125, 3126, 100000}) {
    INFO("iteration " << t);
    CHECK(ema.decay(t) == stylegan_beta(10, 0.05, 64, double(t) * 64));
  }
  // By hand: t = 1: 0.5^(64 / 3.2) = 0.5^20; t = 10: 0.5^(64 / 32) = 0.25; late: 0.5^(64/10000).
  CHECK(ema.decay(1) == Approx(std::pow(0.5, 20.0)));
  CHECK(ema.decay(10) == Approx(0.25));
  CHECK(ema.decay(100000) == Approx(0.99556358));
  CHECK(ema.decay(5000) == ema.decay(100000));  // past the ramp
  // Without the ramp, the half-life from the start.
  EmaWeights flat({parameter({2}, 0.0)}, EmaHalfLife{.kimg = 10, .global_batch = 64});
  for (int64_t t : {0, 1, 10, 3125}) CHECK(flat.decay(t) == Approx(0.99556358));
  CHECK_THROWS_WITH(EmaWeights({parameter({2}, 0.0)}, EmaHalfLife{.kimg = 0}), Catch::Contains("kimg > 0"));
}

TEST_CASE("by a half-life, the average after a few updates is the direct computation", "[ema]") {
  // Weights 1, 2, 3, 4 at iterations 0..3, global batch 8, half-life 0.01 kimg, ramp-up 0.5:
  // the half-life is min(10, 4 t) images, so d_0 = 0, d_t = 0.5^(8 / min(10, 4t)).
  const EmaHalfLife h{.kimg = 0.01, .rampup = 0.5, .global_batch = 8};
  Variable w = parameter({3}, 7.0);
  EmaWeights ema({w}, h);
  double average = 7.0;
  for (int64_t t = 0; t < 4; ++t) {
    w.data().fill_(double(t + 1));
    ema.update(t);
    const double d = t == 0 ? 0.0 : std::pow(0.5, 8.0 / std::min(10.0, 4.0 * double(t)));
    average = d * average + (1 - d) * double(t + 1);
  }
  // d_1 = 0.25, d_2 = 0.5^(8/8) = 0.5, d_3 = 0.5^0.8: 1 -> 1.75 -> 2.375 -> ...
  for (double v : ema.tensors()[0].to_vector()) CHECK(v == Approx(average).epsilon(1e-6));
  CHECK(average == Approx(0.5743491775 * 2.375 + (1 - 0.5743491775) * 4));
}

TEST_CASE("by a half-life, an average restored at iteration t continues as if never stopped, bitwise",
          "[ema]") {
  const EmaHalfLife h{.kimg = 0.05, .rampup = 0.05, .global_batch = 16};
  auto weights_at = [](int64_t t) { return 1.0 / double(t + 3); };  // not representable exactly
  Variable w = parameter({4}, 0.5);
  EmaWeights straight({w}, h);
  for (int64_t t = 0; t < 8; ++t) {
    w.data().fill_(weights_at(t));
    straight.update(t);
  }
  Variable v = parameter({4}, 0.5);
  EmaWeights first({v}, h);
  for (int64_t t = 0; t < 4; ++t) {
    v.data().fill_(weights_at(t));
    first.update(t);
  }
  EmaWeights resumed({v}, h);  // what a checkpoint restores: the average, and the iteration
  resumed.tensors()[0].copy_(first.tensors()[0]);
  for (int64_t t = 4; t < 8; ++t) {
    v.data().fill_(weights_at(t));
    resumed.update(t);
  }
  CHECK(resumed.tensors()[0].to_vector() == straight.tensors()[0].to_vector());
}
