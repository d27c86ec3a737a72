// Step timing between log points: how long the steps of each interval took and how many
// bytes they synchronised, and the run's typical step time.
//
// Contract: start(now, total_bytes) begins an interval (total_bytes: the bytes synchronised
// so far); step() counts one iteration in it; finish(now, total_bytes), after at least one
// step, returns the interval's milliseconds and synchronised bytes per step and ends it
// (start the next with start()). median_ms_per_step() is the median ms per step of the
// finished intervals but the first, which warms up (allocations, bucket rebuilds), the
// upper one of an even count; nullopt before a second interval has finished.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

namespace tandem::models {

class StepTimer {
 public:
  using Clock = std::chrono::steady_clock;

  struct Interval {
    double ms_per_step = 0.0;
    double bytes_per_step = 0.0;
  };

  void start(Clock::time_point now, uint64_t total_bytes);
  void step() { ++steps_; }
  Interval finish(Clock::time_point now, uint64_t total_bytes);
  std::optional<double> median_ms_per_step() const;

 private:
  Clock::time_point start_;
  uint64_t bytes_at_start_ = 0;
  int64_t steps_ = 0;
  bool warmed_up_ = false;
  std::vector<double> interval_ms_;  // after warm-up
};

}  // namespace tandem::models
