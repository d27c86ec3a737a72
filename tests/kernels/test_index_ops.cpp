// index_select, its scatter-add gradient and one_hot against values worked out by hand, and
// the named errors for bad indices.
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/index_ops.h"
#include "tests/kernels/hand_values.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

Tensor indices(const Shape& shape, const std::vector<double>& v) {
  return Tensor::from_values(shape, v, DType::i64);
}

}  // namespace

TEST_CASE("index_select gathers slices along a dim, repeats included", "[index]") {
  Tensor x = counting({4, 3});  // rows 1 2 3 / 4 5 6 / 7 8 9 / 10 11 12
  require_equal(kernels::index_select(x, 0, indices({3}, {2, 0, 2})), {3, 3}, {7, 8, 9, 1, 2, 3, 7, 8, 9});
  require_equal(kernels::index_select(x, 1, indices({2}, {2, 1})), {4, 2}, {3, 2, 6, 5, 9, 8, 12, 11});
  require_equal(kernels::index_select(x, -1, indices({1}, {0})), {4, 1}, {1, 4, 7, 10});
  require_equal(kernels::index_select(x, 0, indices({0}, {})), {0, 3}, {});
  // A middle dim of three: [2, 3, 2] along dim 1.
  require_equal(kernels::index_select(counting({2, 3, 2}, DType::f64), 1, indices({2}, {1, 1})), {2, 2, 2},
                {3, 4, 3, 4, 9, 10, 9, 10});
}

TEST_CASE("index_select_backward scatter-adds, summing repeated indices", "[index]") {
  Tensor g = counting({3, 2});  // 1 2 / 3 4 / 5 6
  require_equal(kernels::index_select_backward(g, {4, 2}, 0, indices({3}, {1, 1, 3})), {4, 2},
                {0, 0, 1 + 3, 2 + 4, 0, 0, 5, 6});
  Tensor g1 = counting({2, 3}, DType::f64);  // 1 2 3 / 4 5 6 along dim 1 of x [2, 2]
  require_equal(kernels::index_select_backward(g1, {2, 2}, 1, indices({3}, {0, 1, 0})), {2, 2},
                {1 + 3, 2, 4 + 6, 5});
  CHECK_THROWS_WITH(
      kernels::index_select_backward(counting({2, 2}), {4, 2}, 0, indices({3}, {0, 1, 2})),
      Catch::Contains("index_select_backward") && Catch::Contains("[2, 2]") && Catch::Contains("[3, 2]"));
}

TEST_CASE("one_hot sets each index's class", "[index]") {
  require_equal(kernels::one_hot(indices({3}, {2, 0, 1}), 4), {3, 4}, {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  Tensor two_d = kernels::one_hot(indices({2, 2}, {1, 0, 0, 1}), 2, DType::f64);
  CHECK(two_d.dtype() == DType::f64);
  require_equal(two_d, {2, 2, 2}, {0, 1, 1, 0, 1, 0, 0, 1});
  CHECK(kernels::one_hot(indices({1}, {0}), 3).dtype() == DType::f32);
}

TEST_CASE("bad indices: errors name the op, the value and the bound", "[index][errors]") {
  Tensor x = counting({4, 3});
  CHECK_THROWS_WITH(
      kernels::index_select(x, 0, indices({3}, {0, 4, 1})),
      Catch::EndsWith("index_select: index 4 (at position 1) is out of range [0, 4) of dim 0 of x [4, 3]"));
  CHECK_THROWS_WITH(kernels::index_select(x, 1, indices({1}, {-1})),
                    Catch::Contains("index_select: index -1") && Catch::Contains("[0, 3)"));
  CHECK_THROWS_WITH(kernels::index_select(x, 0, counting({2})),
                    Catch::Contains("index_select: the index must be int64"));
  CHECK_THROWS_WITH(kernels::index_select(x, 0, indices({1, 1}, {0})), Catch::Contains("must be 1-D"));
  CHECK_THROWS_WITH(kernels::index_select(x, 2, indices({1}, {0})), Catch::Contains("axis 2 out of range"));
  CHECK_THROWS_WITH(kernels::one_hot(indices({2}, {1, 3}), 3),
                    Catch::EndsWith("one_hot: index 3 (at position 1) is out of range [0, 3) of 3 classes"));
  CHECK_THROWS_WITH(kernels::one_hot(indices({1}, {0}), 0), Catch::Contains("classes must be positive"));
  CHECK_THROWS_WITH(kernels::one_hot(indices({1}, {0}), 2, DType::i64),
                    Catch::Contains("float32 or float64"));
}
