// upfirdn2d and StyleGAN2's helpers (autograd/ops.h): values against a direct float64 loop
// that builds the zero-inserted, padded (or cropped) image and convolves it with the
// flipped filter, the helpers' output sizes, what the [1, 3, 3, 1] filter preserves,
// gradients (first order here, second in test_second_order.cpp) and the named errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "kernels/resample.h"
#include "kernels/resample_math.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using kernels::UpFirDn2dParams;
using testing::expect_gradients_match;

namespace {

// StyleGAN2's reference steps, one plane at a time: zero insertion, pad with the positive
// pads, crop the negative ones, convolve (the filter flipped unless flip_filter), keep
// every down-th sample. f is [fh, fw] row-major.
std::vector<double> reference(const Tensor& x, const std::vector<double>& f, int64_t fh, int64_t fw,
                              const UpFirDn2dParams& p) {
  const int64_t planes = x.size(0) * x.size(1), h = x.size(2), w = x.size(3);
  const std::vector<double> xv = x.to_vector();
  std::vector<double> out;
  for (int64_t k = 0; k < planes; ++k) {
    const int64_t uh = h * p.up_y, uw = w * p.up_x;
    std::vector<std::vector<double>> up(size_t(uh), std::vector<double>(size_t(uw), 0.0));
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j)
        up[size_t(i * p.up_y)][size_t(j * p.up_x)] = xv[size_t((k * h + i) * w + j)];
    const int64_t py0 = std::max<int64_t>(p.pad_y0, 0), px0 = std::max<int64_t>(p.pad_x0, 0);
    const int64_t ph = uh + py0 + std::max<int64_t>(p.pad_y1, 0),
                  pw = uw + px0 + std::max<int64_t>(p.pad_x1, 0);
    std::vector<std::vector<double>> padded(size_t(ph), std::vector<double>(size_t(pw), 0.0));
    for (int64_t i = 0; i < uh; ++i)
      for (int64_t j = 0; j < uw; ++j) padded[size_t(i + py0)][size_t(j + px0)] = up[size_t(i)][size_t(j)];
    const int64_t cy0 = std::max<int64_t>(-p.pad_y0, 0), cx0 = std::max<int64_t>(-p.pad_x0, 0);
    const int64_t ch = ph - cy0 - std::max<int64_t>(-p.pad_y1, 0),
                  cw = pw - cx0 - std::max<int64_t>(-p.pad_x1, 0);
    const int64_t fullh = ch - fh + 1, fullw = cw - fw + 1;
    for (int64_t a = 0; a < fullh; a += p.down_y)
      for (int64_t b = 0; b < fullw; b += p.down_x) {
        double acc = 0;
        for (int64_t i = 0; i < fh; ++i)
          for (int64_t j = 0; j < fw; ++j) {
            const int64_t fi = p.flip_filter ? i : fh - 1 - i, fj = p.flip_filter ? j : fw - 1 - j;
            acc += padded[size_t(cy0 + a + i)][size_t(cx0 + b + j)] * f[size_t(fi * fw + fj)];
          }
        out.push_back(acc);
      }
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

std::string describe(const UpFirDn2dParams& p) {
  return "up (" + std::to_string(p.up_x) + ", " + std::to_string(p.up_y) + ") down (" +
         std::to_string(p.down_x) + ", " + std::to_string(p.down_y) + ") pad (" + std::to_string(p.pad_x0) +
         ", " + std::to_string(p.pad_x1) + ", " + std::to_string(p.pad_y0) + ", " + std::to_string(p.pad_y1) +
         ") flip " + std::to_string(p.flip_filter);
}

// Parameter sets covering zero insertion, positive and negative pads, each axis on its
// own, down after up, and both filter orientations.
std::vector<UpFirDn2dParams> cases() {
  std::vector<UpFirDn2dParams> out;
  out.push_back({});
  out.push_back({.up_x = 2, .up_y = 2, .pad_x0 = 2, .pad_x1 = 1, .pad_y0 = 2, .pad_y1 = 1});
  out.push_back({.down_x = 2, .down_y = 2, .pad_x0 = 1, .pad_x1 = 1, .pad_y0 = 1, .pad_y1 = 1});
  out.push_back(
      {.up_x = 3, .up_y = 1, .down_x = 1, .down_y = 2, .pad_x0 = -1, .pad_x1 = 2, .pad_y0 = 3, .pad_y1 = -2});
  out.push_back({.up_x = 2,
                 .up_y = 3,
                 .down_x = 3,
                 .down_y = 2,
                 .pad_x0 = 0,
                 .pad_x1 = -1,
                 .pad_y0 = -2,
                 .pad_y1 = 0,
                 .flip_filter = true});
  out.push_back({.pad_x0 = -1, .pad_x1 = -1, .pad_y0 = 1, .pad_y1 = 2, .flip_filter = true});
  return out;
}

}  // namespace

TEST_CASE(
    "upfirdn2d equals zero insertion, padding or cropping, the flipped filter and down, by a direct loop",
    "[upfirdn2d]") {
  // A filter without symmetry, so a missing or doubled flip changes the values.
  const std::vector<double> f = {0.1, -0.3, 0.7, 0.2, 1.1, -0.5};  // [2, 3]
  const Tensor filter = Tensor::from_values({2, 3}, f, DType::f64);
  const Tensor x = random_input({2, 2, 5, 6}, 501).data();
  for (const UpFirDn2dParams& p : cases()) {
    INFO(describe(p));
    const Tensor y = upfirdn2d(Variable(x), filter, p).data();
    CHECK(y.shape() == kernels::upfirdn2d_output_shape("test", x.shape(), filter.shape(), p));
    check_close(y.to_vector(), reference(x, f, 2, 3, p), 1e-13);
  }
  // A 1-D filter is its outer product with itself.
  const std::vector<double> taps = {0.5, -1.0, 2.0};
  std::vector<double> outer;
  for (double a : taps)
    for (double b : taps) outer.push_back(a * b);
  for (const UpFirDn2dParams& p : cases()) {
    INFO("separable, " << describe(p));
    const Tensor y = upfirdn2d(Variable(x), Tensor::from_values({3}, taps, DType::f64), p).data();
    check_close(y.to_vector(), reference(x, outer, 3, 3, p), 1e-13);
  }
}

TEST_CASE("upfirdn2d's CPU kernel sums each output as the shared formula does, bit for bit (the CUDA twin's)",
          "[upfirdn2d]") {
  // The CPU runs a separable filter as a horizontal pass, then a vertical one, and a 2-D
  // filter a row of outputs at a time; kernels/resample_math.h's upfirdn2d_at, which the
  // CUDA kernel runs per output, must give the same float32 values.
  const Tensor x = random_input({2, 3, 7, 9}, 502).data().to(DType::f32);
  const std::vector<Tensor> filters = {
      Tensor::from_values({4}, {0.125, 0.375, 0.375, 0.125}),          // StyleGAN2's [1, 3, 3, 1], normalised
      Tensor::from_values({3}, {0.3, -0.7, 1.9}),                      // no symmetry
      Tensor::from_values({2, 3}, {0.1, -0.3, 0.7, 0.2, 1.1, -0.5})};  // 2-D
  std::vector<UpFirDn2dParams> all = cases();
  all.push_back({.up_x = 2, .up_y = 2, .pad_x0 = 2, .pad_x1 = 1, .pad_y0 = 2, .pad_y1 = 1});  // upsample2d's
  all.push_back({.down_x = 2, .down_y = 2, .pad_x0 = 1, .pad_x1 = 1, .pad_y0 = 1, .pad_y1 = 1});
  for (const Tensor& filter : filters) {
    for (const UpFirDn2dParams& p : all) {
      INFO("filter " << shape_str(filter.shape()) << ", " << describe(p));
      const Tensor got = kernels::upfirdn2d(x, filter, p);
      const kernels::resample_math::UpFirDn2dGeometry g =
          kernels::resample_math::upfirdn2d_geometry("test", x, filter, p);
      const float* px = x.data<float>();
      const float* pf = filter.data<float>();
      const float* pg = got.data<float>();
      int64_t differ = 0;
      for (int64_t plane = 0; plane < x.size(0) * x.size(1); ++plane)
        for (int64_t oy = 0; oy < g.out_h; ++oy)
          for (int64_t ox = 0; ox < g.out_w; ++ox) {
            const float want =
                kernels::resample_math::upfirdn2d_at(px + plane * g.in_h * g.in_w, pf, g, oy, ox);
            differ += pg[(plane * g.out_h + oy) * g.out_w + ox] != want;
          }
      CHECK(differ == 0);
    }
  }
}

TEST_CASE("setup_separable_filter is setup_filter's filter as two 1-D passes", "[upfirdn2d]") {
  const Tensor sep = setup_separable_filter({1, 3, 3, 1});
  CHECK(sep.shape() == Shape{4});
  CHECK(sep.to_vector() == std::vector<double>{0.125, 0.375, 0.375, 0.125});
  const Tensor sep64 = setup_separable_filter({1, 3, 3, 1}, DType::f64);
  const Tensor outer = setup_filter({1, 3, 3, 1}, DType::f64);
  const Variable x = random_input({2, 3, 8, 6}, 503);  // float64
  const std::vector<std::pair<Tensor, Tensor>> pairs = {
      {upsample2d(x, sep64).data(), upsample2d(x, outer).data()},
      {downsample2d(x, sep64).data(), downsample2d(x, outer).data()},
      {filter2d(x, sep64).data(), filter2d(x, outer).data()}};
  for (const auto& [a, b] : pairs) {
    REQUIRE(a.shape() == b.shape());
    check_close(a.to_vector(), b.to_vector(), 1e-12);
  }
  CHECK_THROWS_WITH(setup_separable_filter({1, -1}),
                    Catch::Contains("setup_separable_filter: the taps sum to 0"));
}

TEST_CASE("upsample2d, downsample2d and filter2d: StyleGAN2's sizes, and the level the binomial filter keeps",
          "[upfirdn2d]") {
  const Tensor f = setup_filter({1, 3, 3, 1}, DType::f64);
  REQUIRE(f.shape() == Shape{4, 4});
  CHECK(f.to_vector()[0] == 1.0 / 64);
  CHECK(f.to_vector()[5] == 9.0 / 64);
  const Variable x = random_input({2, 3, 6, 8}, 502);
  CHECK(upsample2d(x, f).shape() == Shape{2, 3, 12, 16});
  CHECK(upsample2d(x, f, 3).shape() == Shape{2, 3, 18, 24});
  CHECK(downsample2d(x, f).shape() == Shape{2, 3, 3, 4});
  CHECK(filter2d(x, f).shape() == x.shape());
  CHECK(filter2d(x, setup_filter({1, 2, 1}, DType::f64)).shape() == x.shape());
  CHECK(upsample2d(x, f, 2, {.x0 = 1, .x1 = 1}).shape() == Shape{2, 3, 12, 18});
  // 1-tap filters (StyleGAN's pad formula floors (1 - 2) / 2 to -1).
  const Tensor one = Tensor::from_values({1}, {1.0}, DType::f64);
  CHECK(upsample2d(x, one).shape() == Shape{2, 3, 12, 16});
  CHECK(downsample2d(x, one).shape() == Shape{2, 3, 3, 4});

  // A constant image keeps its level away from the zero padding of the borders.
  const double c = 1.75;
  const Variable flat(Tensor::full({1, 1, 8, 8}, c, DType::f64));
  const std::vector<double> up = upsample2d(flat, f).data().to_vector();  // [16, 16]
  for (int64_t i = 2; i < 14; ++i)
    for (int64_t j = 2; j < 14; ++j) CHECK(up[size_t(i * 16 + j)] == Approx(c).epsilon(1e-14));
  const std::vector<double> down = downsample2d(flat, f).data().to_vector();  // [4, 4]
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t j = 1; j < 3; ++j) CHECK(down[size_t(i * 4 + j)] == Approx(c).epsilon(1e-14));
  CHECK(filter2d(flat, f).data().to_vector()[3 * 8 + 4] == Approx(c).epsilon(1e-14));
  // An image that is zero near its borders keeps its mean (sum scaled by up^2 or 1 / down^2),
  // since each polyphase part of [1, 3, 3, 1] / 8 sums to 1 / 2; filter2d keeps its sum.
  std::vector<double> v(12 * 12, 0.0);
  for (int64_t i = 3; i < 9; ++i)
    for (int64_t j = 3; j < 9; ++j) v[size_t(i * 12 + j)] = 0.25 * double(i) - 0.5 * double(j * j % 5);
  const Variable inner(Tensor::from_values({1, 1, 12, 12}, v, DType::f64));
  double total = 0;
  for (double e : v) total += e;
  auto sum_of = [](const Variable& y) { return sum(y).item(); };
  CHECK(sum_of(upsample2d(inner, f)) == Approx(4 * total).epsilon(1e-13));
  CHECK(sum_of(downsample2d(inner, f)) == Approx(total / 4).epsilon(1e-13));
  CHECK(sum_of(filter2d(inner, f)) == Approx(total).epsilon(1e-13));
}

TEST_CASE("gradcheck: upfirdn2d for every case, and the helpers", "[gradcheck][upfirdn2d]") {
  const Tensor filter = Tensor::from_values({2, 3}, {0.1, -0.3, 0.7, 0.2, 1.1, -0.5}, DType::f64);
  for (const UpFirDn2dParams& p : cases()) {
    expect_gradients_match("upfirdn2d " + describe(p),
                           [&](const std::vector<Variable>& v) { return upfirdn2d(v[0], filter, p); },
                           {random_input({1, 2, 5, 6}, 503)});
  }
  const Tensor f = setup_filter({1, 3, 3, 1}, DType::f64);
  expect_gradients_match("upsample2d", [&](const std::vector<Variable>& v) { return upsample2d(v[0], f); },
                         {random_input({1, 2, 3, 4}, 504)});
  expect_gradients_match("downsample2d",
                         [&](const std::vector<Variable>& v) { return downsample2d(v[0], f); },
                         {random_input({1, 2, 6, 4}, 505)});
  expect_gradients_match("filter2d", [&](const std::vector<Variable>& v) { return filter2d(v[0], f); },
                         {random_input({1, 2, 5, 4}, 506)});
}

TEST_CASE("upfirdn2d names what is wrong", "[upfirdn2d][errors]") {
  const Variable x(Tensor::zeros({1, 2, 3, 3}, DType::f64));
  const Tensor f5 = Tensor::zeros({5, 5}, DType::f64);
  CHECK_THROWS_WITH(upfirdn2d(x, f5, {}),
                    Catch::Contains("upfirdn2d: filter [5, 5] is larger than the padded input [3, 3] (input "
                                    "[1, 2, 3, 3]"));
  CHECK_NOTHROW(upfirdn2d(x, f5, {.pad_x0 = 1, .pad_x1 = 1, .pad_y0 = 1, .pad_y1 = 1}));
  CHECK_THROWS_WITH(upfirdn2d(x, f5, {.up_x = 0}),
                    Catch::Contains("upfirdn2d: up and down must be >= 1, got up (0, 1)"));
  CHECK_THROWS_WITH(upfirdn2d(x, f5, {.down_y = -1}),
                    Catch::Contains("upfirdn2d: up and down must be >= 1, got up (1, 1), down (1, -1)"));
  CHECK_THROWS_WITH(upfirdn2d(x, Tensor::zeros({2, 2, 2}, DType::f64), {}),
                    Catch::Contains("upfirdn2d: needs a 1-D [k] or 2-D [fh, fw] filter, got [2, 2, 2]"));
  CHECK_THROWS_WITH(upfirdn2d(Variable(Tensor::zeros({2, 3, 3}, DType::f64)), f5, {}),
                    Catch::Contains("upfirdn2d: needs a 4-D [N, C, H, W] input, got [2, 3, 3]"));
  CHECK_THROWS_WITH(upfirdn2d(x, Tensor::zeros({2, 2}), {}), Catch::Contains("upfirdn2d"));
  CHECK_THROWS_WITH(upsample2d(x, f5, 0), Catch::Contains("upsample2d: up must be >= 1, got 0"));
  CHECK_THROWS_WITH(setup_filter({}), Catch::Contains("setup_filter: needs at least one tap"));
}
