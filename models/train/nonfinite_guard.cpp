#include "models/train/nonfinite_guard.h"

#include <algorithm>
#include <stdexcept>

namespace tandem::models {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

NonFiniteGuard::NonFiniteGuard(int64_t limit, std::string policy, std::ostream* warn)
    : limit_(limit), policy_(std::move(policy)), warn_(warn) {}

int64_t NonFiniteGuard::in_a_row() const {
  int64_t longest = 0;
  for (const auto& [name, streak] : streaks_) longest = std::max(longest, streak.steps);
  return longest;
}

void NonFiniteGuard::observe(int64_t done, const PartCounts& parts) {
  const bool quiet_before = in_a_row() == 0;
  std::vector<std::string> started;  // the parts whose run of non-finite steps starts now
  for (const PartCount& part : parts) {
    const PartCount& before = last_[part.name];
    Streak& streak = streaks_[part.name];
    if (part.nonfinite > before.nonfinite) {
      if (streak.steps++ == 0) {
        streak.since = done;
        started.push_back(part.name);
      }
    } else if (part.steps > before.steps) {
      streak = {};  // a finite step
    }
    last_[part.name] = part;
  }
  if (quiet_before && !started.empty() && warn_) {
    *warn_ << "warning: non-finite averaged gradients at iteration " << done << " (" << joined(started)
           << "): --on-nonfinite " << policy_ << (policy_ == "skip" ? " skips the step" : " scrubs them")
           << "; the run stops after "
           << (limit_ > 0 ? std::to_string(limit_) +
                                " such optimizer steps of a part in a row (--max-nonfinite-steps)"
                          : std::string("none (--max-nonfinite-steps 0)"))
           << "\n";
  }
  const int64_t longest = in_a_row();
  if (limit_ > 0 && longest >= limit_) {
    std::vector<std::string> names;  // every part in a run, the longest's first iteration
    int64_t since = done;
    for (const PartCount& part : parts) {
      const Streak& streak = streaks_[part.name];
      if (streak.steps == 0) continue;
      names.push_back(part.name + " " + std::to_string(streak.steps));
      if (streak.steps == longest) since = std::min(since, streak.since);
    }
    throw std::runtime_error("non-finite averaged gradients in " + std::to_string(longest) +
                             " optimizer steps in a row (iterations " + std::to_string(since) + "-" +
                             std::to_string(done) + ", steps per part: " + joined(names) +
                             ") with --on-nonfinite " + policy_ +
                             ": stopping every rank (--max-nonfinite-steps " + std::to_string(limit_) +
                             "; a lower --lr, --clip-grad or the checkpoint before the divergence may help)");
  }
}

}  // namespace tandem::models
