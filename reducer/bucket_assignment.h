// Assignment of parameters to gradient buckets.
//
// Contract: given the parameters' element counts, dtypes and devices and an order (the
// order gradients are expected to become ready; the Reducer passes reverse registration
// order at first and the observed ready order after a rebuild), returns buckets as lists
// of parameter indices. Parameters are grouped by (dtype, device); within a group they
// fill buckets in the given order, a bucket closing once its bytes reach the cap
// (`first_bucket_bytes` for the first bucket of each group, `bucket_bytes` after). A
// parameter is never split, so a parameter larger than the cap gets a bucket of its own.
// Buckets are ordered by the position of their first parameter in `order`. Deterministic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tandem {

struct BucketParamInfo {
  int64_t count = 0;  // elements
  DType dtype = DType::f32;
  Device device;
};

struct BucketCaps {
  size_t first_bucket_bytes = size_t{1} << 20;  // 1 MB
  size_t bucket_bytes = size_t{25} << 20;       // 25 MB
};

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParamInfo>& params,
                                                const std::vector<size_t>& order, const BucketCaps& caps);

}  // namespace tandem
