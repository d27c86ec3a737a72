// Small tensors whose results a test works out by hand: 1, 2, 3, ... in row-major order,
// and the check of a result's shape and exact values.
#pragma once

#include <catch2/catch.hpp>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::testing {

inline Tensor counting(const Shape& shape, DType dtype = DType::f32) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i + 1);
  return Tensor::from_values(shape, v, dtype);
}

inline void require_equal(const Tensor& got, const Shape& shape, const std::vector<double>& want) {
  INFO(got.str());
  REQUIRE(got.shape() == shape);
  CHECK(got.to_vector() == want);
}

}  // namespace tandem::testing
