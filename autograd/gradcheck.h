// Gradient checking against central finite differences (float64).
//
// Contract: gradcheck(fn, inputs) evaluates fn (inputs -> any-shape Variable), reduces the
// output with fixed pseudo-random weights to a scalar, runs backward, and compares every
// input's gradient with central differences (step eps). It returns the worst relative
// error max|analytic - numeric| / max(1, max|numeric|) per input and a description.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "autograd/variable.h"

namespace tandem {

struct GradcheckResult {
  double max_relative_error = 0.0;
  std::string report;  // per input: name, shape, error; for failure messages
};

GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& fn,
                          const std::vector<Variable>& inputs, double eps = 1e-6);

// A float64 leaf of `shape` requiring grad, filled with normal(0, 1) from `seed`.
Variable random_input(const Shape& shape, uint64_t seed, double stddev = 1.0);

}  // namespace tandem
