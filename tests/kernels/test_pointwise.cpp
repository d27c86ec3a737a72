// abs, sign, pow, clamp, maximum, minimum, compare and where on the CPU: hand-worked values,
// NaN and infinities, broadcasting, and the named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <source_location>
#include <sstream>
#include <vector>

#include "kernels/elementwise.h"

using namespace tandem;
using kernels::Comparison;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Tensor values(const std::vector<double>& v, DType dtype = DType::f64) {
  return Tensor::from_values({static_cast<int64_t>(v.size())}, v, dtype);
}

// Equal element by element, NaN equal to NaN.
void check_values(const Tensor& got, const std::vector<double>& want,
                  std::source_location where = std::source_location::current()) {
  const std::vector<double> g = got.to_vector();
  REQUIRE(g.size() == want.size());
  std::ostringstream both;
  for (size_t i = 0; i < g.size(); ++i) both << " " << g[i] << "/" << want[i];
  INFO("line " << where.line() << ": got/want:" << both.str());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK((std::isnan(want[i]) ? std::isnan(g[i]) : g[i] == want[i]));
  }
}

}  // namespace

TEST_CASE("abs, sign and pow, with NaN and infinities", "[kernels][pointwise]") {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = values({-2.5, -0.0, 0.0, 3.0, kNan, -kInf}, dt);
    check_values(kernels::abs(x), {2.5, 0.0, 0.0, 3.0, kNan, kInf});
    check_values(kernels::sign(x), {-1, 0, 0, 1, 0, -1});
    check_values(kernels::pow_scalar(values({2, 3, 0.25}, dt), 2.0), {4, 9, 0.0625});
    check_values(kernels::pow_scalar(values({4, 0.25}, dt), 0.5), {2, 0.5});
    check_values(kernels::pow_scalar(values({-2, 0}, dt), 3.0), {-8, 0});
    check_values(kernels::pow_scalar(values({2, 0}, dt), -1.0), {0.5, kInf});
    check_values(kernels::pow_scalar(values({5, 0, kNan}, dt), 0.0), {1, 1, 1});  // as std::pow
  }
}

TEST_CASE("clamp and its mask: bounds included, NaN kept, infinite bounds", "[kernels][pointwise]") {
  const Tensor x = values({-3, -1, -0.5, 0, 0.25, 2, kNan});
  check_values(kernels::clamp(x, -1, 0.25), {-1, -1, -0.5, 0, 0.25, 0.25, kNan});
  check_values(kernels::clamp_mask(x, -1, 0.25), {0, 1, 1, 1, 1, 0, 0});
  check_values(kernels::clamp(x, 0, kInf), {0, 0, 0, 0, 0.25, 2, kNan});
  check_values(kernels::clamp(x, -kInf, -1), {-3, -1, -1, -1, -1, -1, kNan});
  CHECK_THROWS_WITH(kernels::clamp(x, 1, -1),
                    Catch::Contains("clamp: lower bound 1 and upper bound -1: need lo <= hi"));
  CHECK_THROWS_WITH(kernels::clamp_mask(x, kNan, 1), Catch::Contains("clamp: lower bound nan"));
}

TEST_CASE("maximum and minimum: NaN from either side, broadcasting", "[kernels][pointwise]") {
  const Tensor a = values({1, -2, kNan, 3, 0.0});
  const Tensor b = values({0, 5, 1, kNan, -0.0});
  check_values(kernels::maximum(a, b), {1, 5, kNan, kNan, 0.0});
  check_values(kernels::minimum(a, b), {0, -2, kNan, kNan, -0.0});
  // [2, 3] against [3] and against [2, 1].
  const Tensor m = Tensor::from_values({2, 3}, {1, 5, -1, 0, 2, 7}, DType::f64);
  check_values(kernels::maximum(m, values({2, 2, 2})), {2, 5, 2, 2, 2, 7});
  check_values(kernels::minimum(Tensor::from_values({2, 1}, {3, 1}, DType::f64), m), {1, 3, -1, 0, 1, 1});
  CHECK_THROWS_WITH(kernels::maximum(values({1, 2}), values({1, 2, 3})),
                    Catch::Contains("maximum: shapes [2] and [3] do not broadcast"));
  CHECK_THROWS_WITH(kernels::minimum(values({1, 2}), values({1, 2}, DType::f32)),
                    Catch::Contains("minimum: dtype mismatch"));
}

TEST_CASE("compare makes 1/0 masks; where selects by them, broadcasting", "[kernels][pointwise]") {
  const Tensor a = values({1, 2, 3, kNan});
  const Tensor b = values({2, 2, 2, 2});
  check_values(kernels::compare(a, b, Comparison::greater), {0, 0, 1, 0});
  check_values(kernels::compare(a, b, Comparison::greater_equal), {0, 1, 1, 0});
  check_values(kernels::compare(a, b, Comparison::less), {1, 0, 0, 0});
  check_values(kernels::compare(a, b, Comparison::less_equal), {1, 1, 0, 0});
  check_values(kernels::compare(a, b, Comparison::equal), {0, 1, 0, 0});
  const Tensor mask = kernels::compare(a, b, Comparison::greater_equal);
  check_values(kernels::where(mask, a, b), {2, 2, 3, 2});
  // A [2, 1] condition, a [2, 3] first choice, a scalar-like [1] second.
  const Tensor rows = Tensor::from_values({2, 1}, {1, 0}, DType::f64);
  const Tensor m = Tensor::from_values({2, 3}, {1, 2, 3, 4, 5, 6}, DType::f64);
  const Tensor out = kernels::where(rows, m, values({-1}));
  CHECK(out.shape() == Shape{2, 3});
  check_values(out.view({6}), {1, 2, 3, -1, -1, -1});
  CHECK_THROWS_WITH(kernels::where(values({1, 0}), m, m),
                    Catch::Contains("where: shapes [2] and [2, 3] do not broadcast"));
  CHECK_THROWS_WITH(kernels::where(values({1, 0, 1}, DType::f32), values({1, 2, 3}), values({1, 2, 3})),
                    Catch::Contains("where: dtype mismatch"));
}
