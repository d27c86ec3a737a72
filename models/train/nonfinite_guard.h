// --max-nonfinite-steps: with --on-nonfinite skip or scrub, a run whose gradients stay
// non-finite would run to --iters doing nothing (every step skipped, or every average
// scrubbed). NonFiniteGuard counts the iterations in a row in which some part's averaged
// gradients were non-finite, warns at the first of such a run (rank 0's stream) and throws
// after `limit` of them, naming the parts and the count.
//
// Its inputs are the Reducer's counts (skipped optimizer steps, scrubbed elements), which the
// ranks agree on inside every backward, so every rank stops at the same iteration without a
// collective of its own.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace tandem::models {

class NonFiniteGuard {
 public:
  // A part's name and its count of non-finite events so far (cumulative).
  using PartCounts = std::vector<std::pair<std::string, int64_t>>;

  // limit 0: never throws (the warning is still given). policy: "skip" or "scrub", for the
  // messages. warn: where the warning goes (rank 0's output), or null.
  NonFiniteGuard(int64_t limit, std::string policy, std::ostream* warn);

  // After iteration `done`: the parts' counts then. Throws std::runtime_error at the limit.
  void observe(int64_t done, const PartCounts& parts);

  int64_t in_a_row() const { return in_a_row_; }

 private:
  int64_t limit_;
  std::string policy_;
  std::ostream* warn_;
  PartCounts last_;
  int64_t in_a_row_ = 0;
  std::vector<std::string> parts_in_run_;  // the parts non-finite at least once in this run
};

}  // namespace tandem::models
