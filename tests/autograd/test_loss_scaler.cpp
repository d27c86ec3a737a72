// The dynamic loss scale (autograd/loss_scaler.h) against PyTorch's GradScaler algorithm,
// written out by hand: scales and skips over planted patterns of overflows, unscaling, its
// state carried across a resume, bad options named.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/loss_scaler.h"
#include "autograd/ops.h"

using namespace tandem;
using optim::LossScaler;
using optim::LossScalerOptions;

TEST_CASE("LossScaler: PyTorch's defaults over a planted pattern of overflows", "[loss_scaler]") {
  // GradScaler(init_scale=2**16, growth_factor=2, backoff_factor=0.5, growth_interval=2000):
  // 2000 clean steps double the scale; an overflow halves it and restarts the count.
  LossScaler scaler;
  CHECK(scaler.scale() == 65536.0);
  for (int i = 0; i < 1999; ++i) scaler.update(false);
  CHECK(scaler.scale() == 65536.0);  // one short of the interval
  CHECK(scaler.growth_tracker() == 1999);
  scaler.update(false);
  CHECK(scaler.scale() == 131072.0);
  CHECK(scaler.growth_tracker() == 0);
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 32768.0);
  for (int i = 0; i < 1999; ++i) scaler.update(false);
  scaler.update(true);  // one short again: the count restarts, no growth
  CHECK(scaler.scale() == 16384.0);
  CHECK(scaler.growth_tracker() == 0);
  for (int i = 0; i < 2000; ++i) scaler.update(false);
  CHECK(scaler.scale() == 32768.0);
  CHECK(scaler.skipped_steps() == 3);
}

TEST_CASE("LossScaler: a short interval, step by step", "[loss_scaler]") {
  // init 8, growth 2 every 3 clean steps, backoff 0.5. The pattern (x: an overflow) and the
  // scale after each update, by the algorithm: growth tracker +1 per clean step, at 3 the
  // scale doubles and the tracker restarts; an overflow halves it and restarts the tracker.
  LossScaler scaler({.init_scale = 8, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
  const std::vector<bool> overflow = {false, false, false, true, false, false,
                                      false, false, true,  true, false};
  const std::vector<double> expected = {8, 8, 16, 8, 8, 8, 16, 16, 8, 4, 4};
  std::vector<double> scales;
  for (bool inf : overflow) {
    scaler.update(inf);
    scales.push_back(scaler.scale());
  }
  CHECK(scales == expected);
  CHECK(scaler.growth_tracker() == 1);
  CHECK(scaler.skipped_steps() == 3);
}

TEST_CASE("LossScaler: growth stops short of infinity", "[loss_scaler]") {
  LossScaler scaler({.init_scale = std::numeric_limits<double>::max() / 1.5, .growth_interval = 1});
  const double before = scaler.scale();
  scaler.update(false);  // x2 would overflow: kept, the count restarts
  CHECK(scaler.scale() == before);
  CHECK(scaler.growth_tracker() == 0);
}

TEST_CASE("LossScaler: unscale divides the gradients and finds an overflow anywhere", "[loss_scaler]") {
  LossScaler scaler({.init_scale = 1024});
  Variable w(Tensor::from_values({3}, {1, 2, 3}), true);
  Variable b(Tensor::from_values({1}, {0}), true);
  Variable unused(Tensor::from_values({2}, {0, 0}), true);  // no gradient: skipped
  // loss = sum(w * x) + 3 b, scaled: the gradients are x and 3, times 1024.
  Variable loss = sum(mul(w, Variable(Tensor::from_values({3}, {0.5, -0.25, 3.0})))) + scale(b, 3.0);
  scaler.scale_loss(loss).backward();
  CHECK(w.grad().to_vector() == std::vector<double>{512, -256, 3072});
  CHECK(scaler.unscale_({w, b, unused}));
  CHECK(w.grad().to_vector() == std::vector<double>{0.5, -0.25, 3.0});  // exact: a power of two
  CHECK(b.grad().to_vector() == std::vector<double>{3.0});
  CHECK_FALSE(unused.grad().defined());
  Tensor inf_grad = Tensor::from_values({1}, {std::numeric_limits<double>::infinity()});
  b.set_grad(inf_grad);
  CHECK_FALSE(scaler.unscale_({w, b}));
  b.set_grad(Tensor::from_values({1}, {std::nan("")}));
  CHECK_FALSE(scaler.unscale_({b, w}));
}

TEST_CASE("LossScaler: its state resumes the same sequence", "[loss_scaler]") {
  const LossScalerOptions options = {.init_scale = 4, .growth_interval = 2};
  const std::vector<bool> pattern = {false, true, false, false, false, true, false, false, false};
  LossScaler straight(options);
  std::vector<double> expected;
  for (bool inf : pattern) {
    straight.update(inf);
    expected.push_back(straight.scale());
  }
  LossScaler first(options);
  std::vector<double> scales;
  for (size_t i = 0; i < 4; ++i) {
    first.update(pattern[i]);
    scales.push_back(first.scale());
  }
  LossScaler resumed(options);  // as a Checkpoint's add_tensors restores it
  for (size_t k = 0; k < resumed.state().size(); ++k) resumed.state()[k] = first.state()[k].clone();
  for (size_t i = 4; i < pattern.size(); ++i) {
    resumed.update(pattern[i]);
    scales.push_back(resumed.scale());
  }
  CHECK(scales == expected);
  CHECK(resumed.skipped_steps() == straight.skipped_steps());
  CHECK(resumed.growth_tracker() == straight.growth_tracker());
}

TEST_CASE("LossScaler: bad options are named", "[loss_scaler]") {
  CHECK_THROWS_WITH(LossScaler({.init_scale = 0}), Catch::Contains("init_scale 0"));
  CHECK_THROWS_WITH(LossScaler({.growth_factor = 1}), Catch::Contains("growth_factor 1"));
  CHECK_THROWS_WITH(LossScaler({.backoff_factor = 1}), Catch::Contains("backoff_factor 1"));
  CHECK_THROWS_WITH(LossScaler({.growth_interval = 0}), Catch::Contains("growth_interval 0"));
}
