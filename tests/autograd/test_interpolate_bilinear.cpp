// interpolate_bilinear (autograd/ops.h): values against a direct float64 loop of PyTorch's
// align_corners=False rule (up, down, non-integer scales, one axis each way), its adjoint
// against the transposed matrix of that loop, gradients (first order here, second in
// test_second_order.cpp) and the named errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/bilinear.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

// The weights with which output d of an axis reads each input: PyTorch's source index
// max((d + 0.5) in / out - 0.5, 0), its floor and the next sample (clamped to the edge).
std::vector<double> axis_weights(int64_t d, int64_t in, int64_t out) {
  std::vector<double> w(static_cast<size_t>(in), 0.0);
  const double src = std::max((double(d) + 0.5) * double(in) / double(out) - 0.5, 0.0);
  const int64_t i0 = std::min(static_cast<int64_t>(std::floor(src)), in - 1);
  const int64_t i1 = std::min(i0 + 1, in - 1);
  const double l1 = src - double(i0);
  w[size_t(i0)] += 1.0 - l1;
  w[size_t(i1)] += l1;
  return w;
}

// The resize of one plane as a dense matrix [out_h out_w, in_h in_w].
std::vector<double> resize_matrix(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w) {
  std::vector<double> m(static_cast<size_t>(out_h * out_w * in_h * in_w), 0.0);
  for (int64_t oy = 0; oy < out_h; ++oy)
    for (int64_t ox = 0; ox < out_w; ++ox) {
      const std::vector<double> wy = axis_weights(oy, in_h, out_h), wx = axis_weights(ox, in_w, out_w);
      for (int64_t iy = 0; iy < in_h; ++iy)
        for (int64_t ix = 0; ix < in_w; ++ix)
          m[size_t(((oy * out_w + ox) * in_h + iy) * in_w + ix)] = wy[size_t(iy)] * wx[size_t(ix)];
    }
  return m;
}

// m (or its transpose) applied to every plane of v [planes, cols].
std::vector<double> apply(const std::vector<double>& m, int64_t rows, int64_t cols,
                          const std::vector<double>& v, bool transpose) {
  const int64_t in = transpose ? rows : cols, out = transpose ? cols : rows;
  const int64_t planes = static_cast<int64_t>(v.size()) / in;
  std::vector<double> r(static_cast<size_t>(planes * out), 0.0);
  for (int64_t k = 0; k < planes; ++k)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const double a = m[size_t(i * cols + j)];
        if (transpose)
          r[size_t(k * out + j)] += a * v[size_t(k * in + i)];
        else
          r[size_t(k * out + i)] += a * v[size_t(k * in + j)];
      }
  return r;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

struct Size {
  int64_t in_h, in_w, out_h, out_w;
};

// Up, down, equal, non-integer scales both ways, one axis up while the other goes down,
// and single rows and columns.
const std::vector<Size> kSizes = {{4, 4, 8, 8},  {8, 6, 4, 3}, {5, 7, 5, 7}, {5, 7, 8, 3},
                                  {7, 3, 3, 11}, {1, 4, 3, 2}, {3, 1, 1, 5}, {6, 9, 13, 4}};

}  // namespace

TEST_CASE("interpolate_bilinear equals PyTorch's align_corners=False rule, by a direct loop", "[bilinear]") {
  // PyTorch's values: [1, 2] doubled is [1, 1.25, 1.75, 2]; halving averages pairs.
  const Variable row(Tensor::from_values({1, 1, 1, 2}, {1.0, 2.0}, DType::f64));
  CHECK(interpolate_bilinear(row, 1, 4).data().to_vector() == std::vector<double>{1.0, 1.25, 1.75, 2.0});
  const Variable four(Tensor::from_values({1, 1, 1, 4}, {1.0, 3.0, 4.0, 8.0}, DType::f64));
  CHECK(interpolate_bilinear(four, 1, 2).data().to_vector() == std::vector<double>{2.0, 6.0});
  for (const Size& s : kSizes) {
    INFO("[" << s.in_h << ", " << s.in_w << "] -> [" << s.out_h << ", " << s.out_w << "]");
    const Tensor x = random_input({2, 3, s.in_h, s.in_w}, 601).data();
    const std::vector<double> m = resize_matrix(s.in_h, s.in_w, s.out_h, s.out_w);
    const Tensor y = interpolate_bilinear(Variable(x), s.out_h, s.out_w).data();
    CHECK(y.shape() == Shape{2, 3, s.out_h, s.out_w});
    check_close(y.to_vector(), apply(m, s.out_h * s.out_w, s.in_h * s.in_w, x.to_vector(), false), 1e-14);
    const Tensor g = random_input({2, 3, s.out_h, s.out_w}, 602).data();
    const Tensor adj = kernels::interpolate_bilinear_adjoint(g, s.in_h, s.in_w);
    CHECK(adj.shape() == x.shape());
    check_close(adj.to_vector(), apply(m, s.out_h * s.out_w, s.in_h * s.in_w, g.to_vector(), true), 1e-13);
  }
}

TEST_CASE("gradcheck: interpolate_bilinear up, down and at non-integer scales", "[gradcheck][bilinear]") {
  for (const Size& s : kSizes) {
    expect_gradients_match(
        "interpolate_bilinear to [" + std::to_string(s.out_h) + ", " + std::to_string(s.out_w) + "]",
        [s](const std::vector<Variable>& v) { return interpolate_bilinear(v[0], s.out_h, s.out_w); },
        {random_input({1, 2, s.in_h, s.in_w}, 603)});
  }
}

TEST_CASE("interpolate_bilinear names what is wrong", "[bilinear][errors]") {
  const Variable x(Tensor::zeros({1, 2, 3, 3}, DType::f64));
  CHECK_THROWS_WITH(
      interpolate_bilinear(x, 0, 4),
      Catch::Contains("interpolate_bilinear: sizes must be >= 1, got [0, 4] for input [1, 2, 3, 3]"));
  CHECK_THROWS_WITH(interpolate_bilinear(Variable(Tensor::zeros({2, 3, 3}, DType::f64)), 2, 2),
                    Catch::Contains("interpolate_bilinear: needs a 4-D [N, C, H, W] input, got [2, 3, 3]"));
  CHECK_THROWS_WITH(interpolate_bilinear(Variable(Tensor::zeros({1, 1, 0, 3}, DType::f64)), 2, 2),
                    Catch::Contains("interpolate_bilinear: the input [1, 1, 0, 3] has an empty plane"));
  CHECK_THROWS_WITH(kernels::interpolate_bilinear_adjoint(Tensor::zeros({1, 1, 2, 2}, DType::f64), 3, -1),
                    Catch::Contains("interpolate_bilinear_adjoint: sizes must be >= 1, got [3, -1]"));
}
