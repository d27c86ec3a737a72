// NumPy broadcasting of the binary elementwise kernels, the reduction of a gradient back to
// an operand's shape and its adjoint broadcast_to: against values worked out by hand, and
// the named errors.
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/broadcast.h"
#include "kernels/elementwise.h"
#include "tests/kernels/hand_values.h"

using namespace tandem;
using namespace tandem::testing;
using tandem::kernels::BinaryOp;

namespace {

Tensor values(const Shape& shape, const std::vector<double>& v, DType dtype = DType::f32) {
  return Tensor::from_values(shape, v, dtype);
}

}  // namespace

TEST_CASE("broadcast_shape follows NumPy's rules", "[broadcast]") {
  using kernels::broadcast_shape;
  CHECK(broadcast_shape("add", {8, 4}, {4}) == Shape{8, 4});
  CHECK(broadcast_shape("add", {4}, {8, 4}) == Shape{8, 4});
  CHECK(broadcast_shape("add", {4, 1}, {1, 3}) == Shape{4, 3});
  CHECK(broadcast_shape("add", {2, 1, 3}, {5, 1}) == Shape{2, 5, 3});
  CHECK(broadcast_shape("add", {}, {2, 3}) == Shape{2, 3});
  CHECK(broadcast_shape("add", {0, 3}, {1, 3}) == Shape{0, 3});
  CHECK_THROWS_WITH(broadcast_shape("mul", {2, 3}, {3, 2}),
                    Catch::EndsWith("mul: shapes [2, 3] and [3, 2] do not broadcast"));
  CHECK_THROWS_WITH(broadcast_shape("add", Shape(9, 1), {1}), Catch::Contains("more than 8 axes"));
}

TEST_CASE("add, sub, mul and div broadcast a row, a column and a scalar", "[broadcast]") {
  Tensor a = counting({2, 3});             // 1 2 3 / 4 5 6
  Tensor row = values({3}, {10, 20, 30});  // along the last axis
  Tensor column = values({2, 1}, {2, 4});  // along the first
  Tensor scalar = values({}, {0.5});
  require_equal(kernels::add(a, row), {2, 3}, {11, 22, 33, 14, 25, 36});
  require_equal(kernels::add(row, a), {2, 3}, {11, 22, 33, 14, 25, 36});
  require_equal(kernels::sub(row, a), {2, 3}, {9, 18, 27, 6, 15, 24});
  require_equal(kernels::mul(a, column), {2, 3}, {2, 4, 6, 16, 20, 24});
  require_equal(kernels::div(a, column), {2, 3}, {0.5, 1, 1.5, 1, 1.25, 1.5});
  require_equal(kernels::div(column, a), {2, 3}, {2, 1, 2.0f / 3, 1, 4.0f / 5, 4.0f / 6});
  require_equal(kernels::mul(scalar, a), {2, 3}, {0.5, 1, 1.5, 2, 2.5, 3});
  // An outer product: [3, 1] * [1, 2].
  require_equal(kernels::mul(values({3, 1}, {1, 2, 3}, DType::f64), values({1, 2}, {10, 100}, DType::f64)),
                {3, 2}, {10, 100, 20, 200, 30, 300});
  // Three axes, both operands broadcast: [2, 1, 2] + [3, 1].
  require_equal(kernels::add(counting({2, 1, 2}), values({3, 1}, {0, 10, 20})), {2, 3, 2},
                {1, 2, 11, 12, 21, 22, 3, 4, 13, 14, 23, 24});
}

TEST_CASE("broadcast_binary on equal shapes equals the same-shape kernels", "[broadcast]") {
  Tensor a = counting({3, 4}, DType::f64), b = kernels::add_scalar(counting({3, 4}, DType::f64), 0.25);
  const BinaryOp ops[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};
  const std::vector<Tensor> same = {kernels::add(a, b), kernels::sub(a, b), kernels::mul(a, b),
                                    kernels::div(a, b)};
  for (size_t i = 0; i < 4; ++i)
    CHECK(kernels::broadcast_binary(ops[i], a, b).to_vector() == same[i].to_vector());
}

TEST_CASE("broadcasting errors name the op and both shapes (or dtypes)", "[broadcast][errors]") {
  Tensor a = Tensor::zeros({8, 4});
  CHECK_THROWS_WITH(kernels::add(a, Tensor::zeros({3})),
                    Catch::EndsWith("add: shapes [8, 4] and [3] do not broadcast"));
  CHECK_THROWS_WITH(kernels::sub(a, Tensor::zeros({8, 3})),
                    Catch::EndsWith("sub: shapes [8, 4] and [8, 3] do not broadcast"));
  CHECK_THROWS_WITH(kernels::div(Tensor::zeros({2}), a),
                    Catch::EndsWith("div: shapes [2] and [8, 4] do not broadcast"));
  CHECK_THROWS_WITH(kernels::mul(a, Tensor::zeros({4}, DType::f64)),
                    Catch::Contains("mul") && Catch::Contains("float32") && Catch::Contains("float64"));
}

TEST_CASE("reduce_to_shape sums a gradient over the broadcast axes", "[broadcast]") {
  Tensor g = counting({2, 3});  // 1 2 3 / 4 5 6
  require_equal(kernels::reduce_to_shape(g, {3}), {3}, {5, 7, 9});
  require_equal(kernels::reduce_to_shape(g, {1, 3}), {1, 3}, {5, 7, 9});
  require_equal(kernels::reduce_to_shape(g, {2, 1}), {2, 1}, {6, 15});
  require_equal(kernels::reduce_to_shape(g, {}), {}, {21});
  require_equal(kernels::reduce_to_shape(counting({2, 2, 2}, DType::f64), {2, 1, 2}), {2, 1, 2},
                {4, 6, 12, 14});
  require_equal(kernels::reduce_to_shape(counting({2, 2, 2}), {2, 1}), {2, 1},
                {1 + 2 + 5 + 6, 3 + 4 + 7 + 8});
  // Equal shapes: the gradient itself, not a copy.
  CHECK(kernels::reduce_to_shape(g, {2, 3}).shares_storage_with(g));
  CHECK_THROWS_WITH(kernels::reduce_to_shape(g, {2}),
                    Catch::EndsWith("reduce_to_shape: shape [2] does not broadcast to [2, 3]"));
}

TEST_CASE("broadcast_to repeats a tensor to a shape", "[broadcast]") {
  require_equal(kernels::broadcast_to(values({3}, {1, 2, 3}), {2, 3}), {2, 3}, {1, 2, 3, 1, 2, 3});
  require_equal(kernels::broadcast_to(values({2, 1}, {1, 2}), {2, 3}), {2, 3}, {1, 1, 1, 2, 2, 2});
  require_equal(kernels::broadcast_to(values({}, {7}), {2}), {2}, {7, 7});
  CHECK_THROWS_WITH(kernels::broadcast_to(values({2}, {1, 2}), {2, 3}),
                    Catch::EndsWith("broadcast_to: shape [2] does not broadcast to [2, 3]"));
}

TEST_CASE("4-d broadcasting and its reduction equal explicit loops, bit for bit, in every axis pattern",
          "[broadcast]") {
  // The CPU kernels merge axes that both operands step through as one (x [N, C, H, W] with
  // b [N, C, 1, 1]: rows of H W) and run the steps 1 and 0 as constants; the visiting order,
  // and so every sum's order, stays the element order.
  const Shape x_shape{2, 3, 4, 5};
  const Tensor x = counting(x_shape, DType::f64);
  auto at = [](const Shape& s, int64_t n, int64_t c, int64_t h, int64_t w) {
    auto i = [&](int d, int64_t v) { return s[static_cast<size_t>(d)] == 1 ? 0 : v; };
    return ((i(0, n) * s[1] + i(1, c)) * s[2] + i(2, h)) * s[3] + i(3, w);
  };
  for (const Shape& b_shape : {Shape{2, 3, 1, 1}, Shape{1, 3, 1, 5}, Shape{2, 1, 4, 1}, Shape{1, 1, 1, 5},
                               Shape{2, 3, 4, 1}, Shape{1, 1, 1, 1}, Shape{2, 3, 4, 5}}) {
    CAPTURE(shape_str(b_shape));
    Tensor b = counting(b_shape, DType::f64);
    b = kernels::scale(b, 0.37);
    const std::vector<double> xv = x.to_vector(), bv = b.to_vector();
    std::vector<double> product(xv.size()), sums(static_cast<size_t>(b.numel()), 0.0);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t h = 0; h < 4; ++h)
          for (int64_t w = 0; w < 5; ++w) {
            const auto i = static_cast<size_t>(at(x_shape, n, c, h, w));
            const auto j = static_cast<size_t>(at(b_shape, n, c, h, w));
            product[i] = xv[i] * bv[j];
            sums[j] += xv[i] * 1.1;
          }
    CHECK(kernels::broadcast_binary(BinaryOp::mul, x, b).to_vector() == product);
    CHECK(kernels::reduce_to_shape(kernels::scale(x, 1.1), b_shape).to_vector() == sums);
  }
}
