// The error the GPU benchmarks check each kernel's result by, against its CPU twin.
//
// Contract: relative_error(got, want) = ||got - want||_2 / ||want||_2 over the elements as
// doubles (the denominator at least 1e-300); infinity when the sizes differ or `got` holds a
// NaN or an infinity.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::bench {

inline double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  if (g.size() != w.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}

}  // namespace tandem::bench
