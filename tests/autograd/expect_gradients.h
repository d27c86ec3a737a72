// The gradcheck assertion of the autograd suites: an op's float64 gradients (autograd/
// gradcheck.h) within kGradcheckTolerance of central finite differences.
#pragma once

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"

namespace tandem::testing {

inline constexpr double kGradcheckTolerance = 1e-6;

using GradFn = std::function<Variable(const std::vector<Variable>&)>;

inline void expect_gradients_match(const std::string& what, const GradFn& fn,
                                   const std::vector<Variable>& inputs) {
  GradcheckResult r = gradcheck(fn, inputs);
  INFO(what << ": " << r.report);
  CHECK(r.max_relative_error < kGradcheckTolerance);
}

}  // namespace tandem::testing
