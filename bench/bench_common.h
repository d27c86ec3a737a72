// What the MPI benchmarks share: a value's maximum and a count's sum over ranks, the median
// of a run list, and a bitwise replica check.
//
// Contract: every function here is a collective over MPI_COMM_WORLD (except median_of):
// every rank calls it, in the same order.
// - max_over_ranks(v): the largest v of any rank.
// - sum_over_ranks(n): the sum of every rank's n.
// - median_of(v): the median (the mean of the middle two for an even count); v non-empty.
// - replica_mismatches(module, group): broadcasts each float32 parameter from rank 0 over
//   `group` and counts the elements whose bytes differ from this rank's, summed over ranks
//   (0: the replicas are bitwise identical).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "autograd/module.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/process_group.h"

namespace tandem::bench {

inline double max_over_ranks(double v) {
  double out = 0;
  TANDEM_CHECK_MPI(MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return out;
}

inline int64_t sum_over_ranks(int64_t n) {
  long long mine = n, total = 0;
  TANDEM_CHECK_MPI(MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
  return total;
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

inline int64_t replica_mismatches(nn::Module& module, dist::ProcessGroup& group) {
  int64_t wrong = 0;
  for (const auto& [name, p] : module.named_parameters()) {
    Tensor mine = p.data().clone();
    Tensor theirs = mine.clone();
    group.broadcast(theirs, 0, "replica check")->wait();
    const float* a = mine.data<float>();
    const float* b = theirs.data<float>();
    for (int64_t k = 0; k < mine.numel(); ++k) wrong += std::memcmp(a + k, b + k, sizeof(float)) != 0;
  }
  return sum_over_ranks(wrong);
}

}  // namespace tandem::bench
