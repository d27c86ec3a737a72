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

void NonFiniteGuard::observe(int64_t done, const PartCounts& parts) {
  std::vector<std::string> now;  // the parts whose count grew in this iteration
  for (const auto& [name, count] : parts) {
    const auto before =
        std::find_if(last_.begin(), last_.end(), [&](const auto& p) { return p.first == name; });
    if (count > (before == last_.end() ? 0 : before->second)) now.push_back(name);
  }
  last_ = parts;
  if (now.empty()) {
    in_a_row_ = 0;
    parts_in_run_.clear();
    return;
  }
  for (const std::string& n : now)
    if (std::find(parts_in_run_.begin(), parts_in_run_.end(), n) == parts_in_run_.end())
      parts_in_run_.push_back(n);
  if (++in_a_row_ == 1 && warn_) {
    *warn_ << "warning: non-finite averaged gradients at iteration " << done << " (" << joined(now)
           << "): --on-nonfinite " << policy_ << (policy_ == "skip" ? " skips the step" : " scrubs them")
           << "; the run stops after "
           << (limit_ > 0 ? std::to_string(limit_) + " such iterations in a row (--max-nonfinite-steps)"
                          : std::string("none (--max-nonfinite-steps 0)"))
           << "\n";
  }
  if (limit_ > 0 && in_a_row_ >= limit_) {
    throw std::runtime_error("non-finite averaged gradients in " + std::to_string(in_a_row_) +
                             " iterations in a row (iterations " + std::to_string(done - in_a_row_ + 1) +
                             "-" + std::to_string(done) + ", parts: " + joined(parts_in_run_) +
                             ") with --on-nonfinite " + policy_ +
                             ": stopping every rank (--max-nonfinite-steps " + std::to_string(limit_) +
                             "; a lower --lr, --clip-grad or the checkpoint before the divergence may help)");
  }
}

}  // namespace tandem::models
