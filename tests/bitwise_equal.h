// The suites' exact comparison of two tensors: the same shape, the same dtype and the same
// bytes (CPU tensors). For results that must not move by one rounding.
#pragma once

#include <cstring>

#include "runtime/tensor.h"

namespace tandem::testing {

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

}  // namespace tandem::testing
