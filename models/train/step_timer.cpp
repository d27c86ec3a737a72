#include "models/train/step_timer.h"

#include <algorithm>

namespace tandem::models {

void StepTimer::start(Clock::time_point now, uint64_t total_bytes) {
  start_ = now;
  bytes_at_start_ = total_bytes;
  steps_ = 0;
}

StepTimer::Interval StepTimer::finish(Clock::time_point now, uint64_t total_bytes) {
  const double seconds = std::chrono::duration<double>(now - start_).count();
  Interval interval;
  interval.ms_per_step = 1000.0 * seconds / static_cast<double>(steps_);
  interval.bytes_per_step = static_cast<double>(total_bytes - bytes_at_start_) / static_cast<double>(steps_);
  if (warmed_up_) interval_ms_.push_back(interval.ms_per_step);
  warmed_up_ = true;
  return interval;
}

std::optional<double> StepTimer::median_ms_per_step() const {
  if (interval_ms_.empty()) return std::nullopt;
  std::vector<double> sorted = interval_ms_;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

}  // namespace tandem::models
