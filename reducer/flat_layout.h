// FlatLayout: where each phase's buckets lie in the Reducer's flat storage, one buffer per
// (dtype, device) of its parameters (DESIGN.md §3 "Reducer").
//
// Contract:
// - Parameters are grouped by (dtype, device); groups are numbered in the order of their
//   first parameter. group_of(i) is parameter i's group.
// - capacity(g): the elements of group g's buffer: the sum over its parameters of their
//   element counts, each rounded up to kAlign. Any phase's buckets fit it.
// - place(buckets): each bucket's element offset in its group's buffer. The buckets of a
//   group are packed in the given order from element 0, each starting on a multiple of
//   kAlign elements (64 bytes of float32). Every phase places its buckets from 0, so phases
//   share the storage: a phase costs its offsets, not memory. Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reducer/bucket_assignment.h"

namespace tandem {

class FlatLayout {
 public:
  static constexpr int64_t kAlign = 16;

  explicit FlatLayout(const std::vector<BucketParamInfo>& params);

  size_t groups() const { return capacity_.size(); }
  size_t group_of(size_t param) const { return group_of_[param]; }
  int64_t capacity(size_t group) const { return capacity_[group]; }
  std::vector<int64_t> place(const std::vector<std::vector<size_t>>& buckets) const;

 private:
  std::vector<BucketParamInfo> params_;
  std::vector<size_t> group_of_;
  std::vector<int64_t> capacity_;
};

}  // namespace tandem
