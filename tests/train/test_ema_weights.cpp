// The moving average of G's weights against its closed form, worked out by hand, and the
// swap that draws samples from it.
#include <catch2/catch.hpp>
#include <vector>

#include "models/train/ema_weights.h"

using namespace tandem;
using namespace tandem::models;

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
