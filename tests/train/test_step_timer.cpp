// The step timer on a clock the test moves by hand.
#include <catch2/catch.hpp>

#include "models/train/step_timer.h"

using namespace tandem::models;
using std::chrono::milliseconds;

namespace {

// Runs `steps` steps taking `ms` milliseconds in all from `now`, with `bytes` synchronised.
StepTimer::Interval interval(StepTimer& timer, StepTimer::Clock::time_point& now, uint64_t& total_bytes,
                             int steps, int ms, uint64_t bytes) {
  timer.start(now, total_bytes);
  for (int i = 0; i < steps; ++i) timer.step();
  now += milliseconds(ms);
  total_bytes += bytes;
  return timer.finish(now, total_bytes);
}

}  // namespace

TEST_CASE("an interval's time and bytes are shared by its steps", "[step_timer]") {
  StepTimer timer;
  auto now = StepTimer::Clock::time_point{} + std::chrono::hours(1);
  uint64_t bytes = 1000;  // sent before the interval: not counted
  StepTimer::Interval first = interval(timer, now, bytes, 4, 40, 8000);
  CHECK(first.ms_per_step == Approx(10.0));
  CHECK(first.bytes_per_step == Approx(2000.0));
  StepTimer::Interval second = interval(timer, now, bytes, 3, 45, 300);
  CHECK(second.ms_per_step == Approx(15.0));
  CHECK(second.bytes_per_step == Approx(100.0));
}

TEST_CASE("the median step time leaves out the first interval, the warm-up", "[step_timer]") {
  StepTimer timer;
  auto now = StepTimer::Clock::time_point{};
  uint64_t bytes = 0;
  interval(timer, now, bytes, 1, 500, 0);  // warm-up: 500 ms per step
  CHECK_FALSE(timer.median_ms_per_step().has_value());
  interval(timer, now, bytes, 2, 40, 0);  // 20
  CHECK(*timer.median_ms_per_step() == Approx(20.0));
  interval(timer, now, bytes, 1, 5, 0);                // 5
  CHECK(*timer.median_ms_per_step() == Approx(20.0));  // of {5, 20}: the upper one
  interval(timer, now, bytes, 5, 50, 0);               // 10
  CHECK(*timer.median_ms_per_step() == Approx(10.0));  // of {5, 10, 20}
}
