// FlatLayout: where each phase's buckets lie in the Reducer's flat storage, one buffer per
// (dtype, device) of its parameters (DESIGN.md §3 "Reducer").
//
// Contract:
// - Parameters are grouped by (dtype, device); groups are numbered in the order of their
//   first parameter. group_of(i) is parameter i's group.
// - capacity(g): the elements of group g's buffer: the sum over its parameters of their
//   element counts, each rounded up to kAlign. Any phase's buckets fit it.
// - Each parameter belongs to a region (region_of, e.g. its model part: "generator",
//   "discriminator"). A group's buffer holds its regions one after another, each sized as
//   capacity() is, over the region's own parameters.
// - place(buckets): each bucket's element offset in its group's buffer. The buckets of a
//   group are packed in the given order, each starting on a multiple of kAlign elements
//   (64 bytes of float32): from the start of their region when all of the group's buckets
//   hold parameters of one region, else from element 0. Phases share the storage: a phase
//   costs its offsets, not memory; phases of different regions never overlap, so a GAN's
//   D and G phases leave each other's gradient views in place. Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "reducer/bucket_assignment.h"

namespace tandem {

class FlatLayout {
 public:
  static constexpr int64_t kAlign = 16;

  // region_of: per parameter, a small region number; empty: one region.
  FlatLayout(const std::vector<BucketParamInfo>& params, const std::vector<size_t>& region_of);

  size_t groups() const { return capacity_.size(); }
  size_t group_of(size_t param) const { return group_of_[param]; }
  int64_t capacity(size_t group) const { return capacity_[group]; }
  std::vector<int64_t> place(const std::vector<std::vector<size_t>>& buckets) const;

 private:
  std::vector<BucketParamInfo> params_;
  std::vector<size_t> group_of_;
  std::vector<size_t> region_of_;
  std::vector<int64_t> capacity_;
  std::vector<std::vector<int64_t>> region_start_;  // per group, per region: its first element
};

}  // namespace tandem
