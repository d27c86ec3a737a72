// argmax/argmin along an axis (ties, NaN, keepdim), gather_axis and scatter_axis at their
// positions, and the named errors, on the CPU.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/axis_select.h"

using namespace tandem;

namespace {

Tensor matrix(const Shape& shape, const std::vector<double>& v) {
  return Tensor::from_values(shape, v, DType::f64);
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = t.data<int64_t>()[i];
  return out;
}

}  // namespace

TEST_CASE("argmax and argmin along each axis: first on ties, NaN picked, keepdim", "[kernels][axis_select]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // [2, 3]: rows {1, 5, 5} and {nan, -2, 7}.
  const Tensor x = matrix({2, 3}, {1, 5, 5, nan, -2, 7});
  CHECK(ints(kernels::argmax_axis(x, 1)) == std::vector<int64_t>{1, 0});
  CHECK(ints(kernels::argmin_axis(x, -1)) == std::vector<int64_t>{0, 0});
  CHECK(ints(kernels::argmax_axis(x, 0)) == std::vector<int64_t>{1, 0, 1});
  CHECK(ints(kernels::argmin_axis(x, 0)) == std::vector<int64_t>{1, 1, 0});
  CHECK(kernels::argmax_axis(x, 1).shape() == Shape{2});
  CHECK(kernels::argmax_axis(x, 1, true).shape() == Shape{2, 1});
  // A middle axis of [2, 3, 2].
  const Tensor y = matrix({2, 3, 2}, {0, 9, 4, 1, 2, 3, 8, 0, 1, 8, 7, 2});
  CHECK(ints(kernels::argmax_axis(y, 1)) == std::vector<int64_t>{1, 0, 0, 1});
  CHECK_THROWS_WITH(kernels::argmax_axis(x, 2),
                    Catch::Contains("argmax: axis 2 out of range for shape [2, 3]"));
  CHECK_THROWS_WITH(kernels::argmin_axis(Tensor::empty({2, 0}, DType::f64), 1),
                    Catch::Contains("argmin: axis 1 of"));
}

TEST_CASE("gather_axis reads at argmax's positions; scatter_axis puts them back", "[kernels][axis_select]") {
  const Tensor y = matrix({2, 3, 2}, {0, 9, 4, 1, 2, 3, 8, 0, 1, 8, 7, 2});
  const Tensor index = kernels::argmax_axis(y, 1, true);  // [2, 1, 2]
  const Tensor top = kernels::gather_axis(y, 1, index);
  CHECK(top.shape() == Shape{2, 1, 2});
  CHECK(top.to_vector() == std::vector<double>{4, 9, 8, 8});
  const Tensor back = kernels::scatter_axis(top, y.shape(), 1, index);
  CHECK(back.to_vector() == std::vector<double>{0, 9, 4, 0, 0, 0, 8, 0, 0, 8, 0, 0});
  // Named errors: the index's shape and values, and its dtype.
  CHECK_THROWS_WITH(
      kernels::gather_axis(y, 1, kernels::argmax_axis(y, 1)),
      Catch::Contains("gather_axis: index [2, 2] for shape [2, 3, 2] along axis 1 (want [2, 1, 2])"));
  Tensor bad = index.clone();
  bad.data<int64_t>()[3] = 3;
  CHECK_THROWS_WITH(kernels::gather_axis(y, 1, bad),
                    Catch::Contains("gather_axis: index 3 (at position 3) is out of range [0, 3)"));
  CHECK_THROWS_WITH(kernels::scatter_axis(top, y.shape(), 1, top),
                    Catch::Contains("scatter_axis: the index must be int64"));
}
