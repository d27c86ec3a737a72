// --max-nonfinite-steps: with --on-nonfinite skip or scrub, a run whose gradients stay
// non-finite would run to --iters doing nothing (every step skipped, or every average
// scrubbed). NonFiniteGuard counts, per part, its optimizer steps in a row whose averaged
// gradients were non-finite, warns when a part starts such a run while no other part is in
// one (rank 0's stream) and throws when one part reaches `limit`, naming the parts and the
// count.
//
// Steps, not iterations: under --accumulate k a part steps every k-th iteration and under
// --n-critic the generator every n-th; an iteration in which a part does not step says
// nothing about it and leaves its count as it is (a finite step resets it).
//
// Its inputs are the Reducer's counts (skipped optimizer steps, scrubbed elements) and the
// optimizer wrappers' step counts, which the ranks agree on inside every backward, so every
// rank stops at the same iteration without a collective of its own.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::models {

class NonFiniteGuard {
 public:
  // A part's counts so far (cumulative): its non-finite events (skipped steps, or scrubbed
  // elements) and its optimizer steps attempted (taken or skipped).
  struct PartCount {
    std::string name;
    int64_t nonfinite = 0;
    int64_t steps = 0;
  };
  using PartCounts = std::vector<PartCount>;

  // limit 0: never throws (the warning is still given). policy: "skip" or "scrub", for the
  // messages. warn: where the warning goes (rank 0's output), or null.
  NonFiniteGuard(int64_t limit, std::string policy, std::ostream* warn);

  // After iteration `done`: the parts' counts then. Throws std::runtime_error at the limit.
  void observe(int64_t done, const PartCounts& parts);

  // The longest current run of non-finite steps over the parts.
  int64_t in_a_row() const;

 private:
  struct Streak {
    int64_t steps = 0;  // non-finite steps in a row
    int64_t since = 0;  // the iteration of the first of them
  };

  int64_t limit_;
  std::string policy_;
  std::ostream* warn_;
  std::map<std::string, PartCount> last_;
  std::map<std::string, Streak> streaks_;
};

}  // namespace tandem::models
