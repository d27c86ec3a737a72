// scrub_non_finite_: NaN -> 0, +-Inf -> +-limit, finite values kept bit for bit, the count
// of replaced elements returned; in float32 and float64, and in a view.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/non_finite.h"

using namespace tandem;

TEST_CASE("scrub_non_finite_ replaces NaN and Inf, keeps the rest and counts what it replaced",
          "[kernels][non_finite]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO(dtype_name(dtype));
    Tensor t = Tensor::from_values({7}, {1.0 / 3.0, nan, inf, -inf, -0.0, 1e30, -nan}, dtype);
    CHECK(kernels::scrub_non_finite_(t, 1e5) == 4);
    const std::vector<double> got = t.to_vector();
    CHECK(got == std::vector<double>{Tensor::from_values({1}, {1.0 / 3.0}, dtype).to_vector()[0], 0.0, 1e5,
                                     -1e5, 0.0, Tensor::from_values({1}, {1e30}, dtype).to_vector()[0], 0.0});
    CHECK(std::signbit(got[4]));                     // -0.0 is finite: kept as it is
    CHECK(kernels::scrub_non_finite_(t, 1e5) == 0);  // nothing left to replace
  }
  // A view replaces inside its range only.
  Tensor flat = Tensor::from_values({4}, {nan, nan, inf, nan});
  Tensor middle = flat.view_range(1, {2});
  CHECK(kernels::scrub_non_finite_(middle, 7.0) == 2);
  const std::vector<double> after = flat.to_vector();
  CHECK((std::isnan(after[0]) && after[1] == 0.0 && after[2] == 7.0 && std::isnan(after[3])));
  Tensor ints = Tensor::zeros({2}, DType::i64);
  CHECK_THROWS_WITH(kernels::scrub_non_finite_(ints, 1.0), Catch::Contains("scrub_non_finite_"));
}
