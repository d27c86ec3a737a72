// The agreement that begins a synced backward (DESIGN.md §3, Reducer step 2): one small
// collective from which every rank learns the globally used set and that the ranks are in
// step. reducer.h says when the Reducer runs it and what it protects.
//
// Contract:
// - agree() is collective over the group: every rank calls it for the same backward, with
//   the parameters its backward reaches (`local`), and gets the parameters at least one
//   rank reaches.
// - Each rank also passes its position: the backward's count on this rank and the optimizer
//   steps taken since the Reducer was made. Positions that differ between ranks are an Error
//   on every rank listing each rank's position and its backwards that reached none of the
//   parameters (one more collective, on that path only).
//   They are compared modulo 2^20 by the sums of them and of their squares, which match
//   all-equal positions only when the positions are equal.
// - Among the ranks that reach any parameter, a part reached by some and not by others is
//   an Error on every rank naming the part, its first parameter and allow_absent_ranks,
//   unless allow_absent_ranks.
// - The counts are summed by the caller's SumCounts (the Reducer's: BucketStore::sum_counts,
//   bucket_store.h); only an Error's message issues a collective of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem {

// The parts of a model: the first component of each parameter's name ("generator" of
// "generator.fc1.weight"; "" at the top level), distinct, in first-seen order.
struct ModelParts {
  explicit ModelParts(const std::vector<std::string>& param_names);
  // Parameter i's part, "(top level)" for "".
  std::string name_of(size_t i) const;
  // "6 of 12 parameters (discriminator)": how many parameters `used` (indices) holds, and
  // their parts in the order they first appear in it.
  std::string describe(const std::vector<size_t>& used) const;

  std::vector<std::string> names;  // distinct, first-seen order
  std::vector<size_t> of;          // per parameter, an index into names
};

// Where a rank is when it agrees: its backward's count, the optimizer steps it has taken and,
// for the message when ranks diverge, how many of its backwards so far reached none of the
// parameters (all since the Reducer was made).
struct RankPosition {
  int64_t backward = 0;
  int64_t steps = 0;
  int64_t unreaching = 0;
};

class UsedSetAgreement {
 public:
  // `owner` names the Reducer in messages and tags.
  UsedSetAgreement(std::vector<std::string> param_names, std::string owner, bool allow_absent_ranks);

  // The int64 counts one agreement sums.
  int64_t size() const { return static_cast<int64_t>(names_.size() + parts_.names.size() + 5); }
  const ModelParts& parts() const { return parts_; }
  // Agreements issued so far (counted once the counts are summed).
  int64_t issued() const { return issued_; }
  // Sums int64 counts over the ranks of the group, in place (collective).
  using SumCounts = std::function<void(Tensor& counts)>;
  // See the contract. `at`: this rank's position.
  std::vector<bool> agree(dist::ProcessGroup& group, const SumCounts& sum_counts,
                          const std::vector<bool>& local, const RankPosition& at);

 private:
  // Every rank's position (one more collective) in the Error.
  [[noreturn]] void fail_out_of_step(dist::ProcessGroup& group, const RankPosition& at) const;

  std::vector<std::string> names_;
  ModelParts parts_;
  std::string owner_;
  bool allow_absent_ranks_;
  int64_t issued_ = 0;
};

}  // namespace tandem
