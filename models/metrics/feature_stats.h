// Feature statistics for FID: the mean and covariance of feature vectors, summed over the
// ranks' shards of a sample set.
//
// Contract:
// - FeatureStats(dim) starts empty. add(features) takes [n, dim] float32 or float64 on any
//   device (copied to the host) and adds n to the count, each row to the float64 sum and
//   its outer product to the float64 sum of x x^T. Another shape is an Error naming both.
// - allreduce(group, tag) sums count, sum and sum of outer products over the group's ranks
//   in ONE float64 sum allreduce on host memory (dist::allreduce_host); a collective: every
//   rank calls it once, in the same order. Afterwards every rank holds the totals.
// - gaussian() is the mean (sum / count) and the unbiased covariance ((S - count mean
//   mean^T) / (count - 1), as the standard FID) as float64 CPU tensors [dim] and [dim, dim];
//   fewer than 2 samples is an Error.
// - The sums do not depend on how the samples are split into add() calls or ranks except
//   through float64 rounding (relative differences of order 1e-15 per sum).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/tensor.h"

namespace tandem::metrics {

struct GaussianStats {
  int64_t count = 0;
  Tensor mean;  // float64 [dim]
  Tensor cov;   // float64 [dim, dim]
};

class FeatureStats {
 public:
  explicit FeatureStats(int64_t dim);
  void add(const Tensor& features);
  void allreduce(dist::ProcessGroup& group, const std::string& tag);
  int64_t count() const { return count_; }
  int64_t dim() const { return dim_; }
  GaussianStats gaussian() const;

 private:
  int64_t dim_;
  int64_t count_ = 0;
  std::vector<double> sum_;    // [dim]
  std::vector<double> outer_;  // [dim, dim], both triangles
};

}  // namespace tandem::metrics
