// Grouped and dilated convolutions (PyTorch's semantics): all six conv kernels against a
// direct float64 loop over every (output, tap) pair.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/conv.h"
#include "runtime/rng.h"

using namespace tandem;
using kernels::Conv2dParams;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t.to(dtype);
}

// Calls tap(xi, wi, yi) for every product x[xi] w[wi] that conv2d adds into y[yi], for
// x [n, c, h, w], weight [o, c / groups, kh, kw] and y [n, o, ho, wo]: output channel oc of
// group oc / (o / groups) reads input channel group * (c / groups) + cl, at
// ih = oh stride - padding + ki dilation (and likewise along the width).
template <typename Tap>
void for_each_tap(const Shape& xs, const Shape& ws, int64_t ho, int64_t wo, const Conv2dParams& p,
                  Tap&& tap) {
  const int64_t cg = ws[1], og = ws[0] / p.groups;
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t oc = 0; oc < ws[0]; ++oc)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow)
          for (int64_t cl = 0; cl < cg; ++cl)
            for (int64_t ki = 0; ki < ws[2]; ++ki)
              for (int64_t kj = 0; kj < ws[3]; ++kj) {
                const int64_t ih = oh * p.stride - p.padding + ki * p.dilation;
                const int64_t iw = ow * p.stride - p.padding + kj * p.dilation;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                const int64_t c = (oc / og) * cg + cl;
                tap(static_cast<size_t>(((n * xs[1] + c) * xs[2] + ih) * xs[3] + iw),
                    static_cast<size_t>(((oc * cg + cl) * ws[2] + ki) * ws[3] + kj),
                    static_cast<size_t>(((n * ws[0] + oc) * ho + oh) * wo + ow));
              }
}

// The conv2d output size along one axis.
int64_t conv_out(int64_t in, int64_t k, const Conv2dParams& p) {
  return (in + 2 * p.padding - p.dilation * (k - 1) - 1) / p.stride + 1;
}

// The conv_transpose2d output size along one axis.
int64_t transpose_out(int64_t in, int64_t k, const Conv2dParams& p) {
  return (in - 1) * p.stride - 2 * p.padding + p.dilation * (k - 1) + p.output_padding + 1;
}

std::vector<double> zeros(const Shape& s) {
  return std::vector<double>(static_cast<size_t>(shape_numel(s)), 0.0);
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

struct Case {
  int64_t n, c, h, w, o, k;
  Conv2dParams p;
};

void capture_case(const Case& cc) {
  UNSCOPED_INFO("n " << cc.n << " c " << cc.c << " h " << cc.h << " w " << cc.w << " o " << cc.o << " k "
                     << cc.k << " stride " << cc.p.stride << " padding " << cc.p.padding << " output_padding "
                     << cc.p.output_padding << " dilation " << cc.p.dilation << " groups " << cc.p.groups);
}

// Grouped, depthwise (groups == c, with and without a channel multiplier), dilation 2,
// stride 2 with padding, batch 1 with odd sizes; batches of several samples share a GEMM.
const std::vector<Case> kConvCases = {
    {2, 4, 7, 6, 6, 3, {.stride = 1, .padding = 1, .groups = 2}},
    {2, 3, 6, 6, 3, 3, {.stride = 1, .padding = 1, .groups = 3}},
    {2, 3, 5, 6, 6, 3, {.stride = 2, .padding = 1, .groups = 3}},
    {2, 2, 9, 8, 3, 3, {.stride = 1, .padding = 2, .dilation = 2}},
    {3, 4, 9, 7, 4, 3, {.stride = 2, .padding = 1, .dilation = 2, .groups = 2}},
    {1, 6, 5, 7, 9, 2, {.stride = 3, .padding = 1, .dilation = 3, .groups = 3}},
};

// x [n, c, h, w], weight [c, o / groups, k, k]: grouped with output_padding, depthwise
// dilated, output_padding below the dilation though not below the stride, batch 1.
const std::vector<Case> kTransposeCases = {
    {2, 4, 3, 4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2}},
    {2, 3, 4, 3, 3, 3, {.stride = 1, .padding = 0, .dilation = 2, .groups = 3}},
    {2, 4, 3, 3, 2, 2, {.stride = 2, .padding = 1, .output_padding = 1, .dilation = 2, .groups = 2}},
    {2, 2, 3, 5, 4, 3, {.stride = 1, .padding = 1, .output_padding = 1, .dilation = 2}},
    {1, 6, 3, 5, 3, 3, {.stride = 3, .padding = 2, .output_padding = 2, .dilation = 2, .groups = 3}},
};

}  // namespace

TEST_CASE("grouped and dilated conv2d and its backward kernels match a direct loop", "[conv][grouped]") {
  for (const Case& cc : kConvCases) {
    capture_case(cc);
    const Shape xs{cc.n, cc.c, cc.h, cc.w}, ws{cc.o, cc.c / cc.p.groups, cc.k, cc.k};
    const Shape ys{cc.n, cc.o, conv_out(cc.h, cc.k, cc.p), conv_out(cc.w, cc.k, cc.p)};
    Tensor x = random_tensor(xs, 1), w = random_tensor(ws, 2), g = random_tensor(ys, 3);
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), gv = g.to_vector();
    std::vector<double> y = zeros(ys), dx = zeros(xs), dw = zeros(ws);
    for_each_tap(xs, ws, ys[2], ys[3], cc.p, [&](size_t xi, size_t wi, size_t yi) {
      y[yi] += xv[xi] * wv[wi];
      dx[xi] += gv[yi] * wv[wi];
      dw[wi] += gv[yi] * xv[xi];
    });
    Tensor got = kernels::conv2d(x, w, cc.p);
    REQUIRE(got.shape() == ys);
    CHECK(max_abs_diff(got.to_vector(), y) < 1e-12);
    CHECK(max_abs_diff(kernels::conv2d(x.to(DType::f32), w.to(DType::f32), cc.p).to_vector(), y) < 1e-4);
    CHECK(max_abs_diff(kernels::conv2d_backward_input(g, w, xs, cc.p).to_vector(), dx) < 1e-12);
    CHECK(max_abs_diff(kernels::conv2d_backward_weight(g, x, ws, cc.p).to_vector(), dw) < 1e-12);
    // float32 runs through oneDNN where the build has it: every pass, not the forward alone.
    const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32), g32 = g.to(DType::f32);
    CHECK(max_abs_diff(kernels::conv2d_backward_input(g32, w32, xs, cc.p).to_vector(), dx) < 1e-4);
    CHECK(max_abs_diff(kernels::conv2d_backward_weight(g32, x32, ws, cc.p).to_vector(), dw) < 1e-4);
  }
}

TEST_CASE("grouped and dilated conv_transpose2d and its backward kernels match a direct loop",
          "[conv][grouped]") {
  for (const Case& cc : kTransposeCases) {
    capture_case(cc);
    // conv_transpose2d is the adjoint of the conv2d from its output [n, o, ho, wo] to its
    // input [n, c, h, w], whose weight [c, o / groups, k, k] is the same array.
    const Shape xs{cc.n, cc.c, cc.h, cc.w}, ws{cc.c, cc.o / cc.p.groups, cc.k, cc.k};
    const Shape ys{cc.n, cc.o, transpose_out(cc.h, cc.k, cc.p), transpose_out(cc.w, cc.k, cc.p)};
    Tensor x = random_tensor(xs, 4), w = random_tensor(ws, 5), g = random_tensor(ys, 6);
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), gv = g.to_vector();
    std::vector<double> y = zeros(ys), dx = zeros(xs), dw = zeros(ws);
    for_each_tap(ys, ws, cc.h, cc.w, cc.p, [&](size_t yi, size_t wi, size_t xi) {
      y[yi] += xv[xi] * wv[wi];
      dx[xi] += gv[yi] * wv[wi];
      dw[wi] += gv[yi] * xv[xi];
    });
    Tensor got = kernels::conv_transpose2d(x, w, cc.p);
    REQUIRE(got.shape() == ys);
    CHECK(max_abs_diff(got.to_vector(), y) < 1e-12);
    CHECK(max_abs_diff(kernels::conv_transpose2d(x.to(DType::f32), w.to(DType::f32), cc.p).to_vector(), y) <
          1e-4);
    CHECK(max_abs_diff(kernels::conv_transpose2d_backward_input(g, w, xs, cc.p).to_vector(), dx) < 1e-12);
    CHECK(max_abs_diff(kernels::conv_transpose2d_backward_weight(g, x, ws, cc.p).to_vector(), dw) < 1e-12);
    const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32), g32 = g.to(DType::f32);
    CHECK(max_abs_diff(kernels::conv_transpose2d_backward_input(g32, w32, xs, cc.p).to_vector(), dx) < 1e-4);
    CHECK(max_abs_diff(kernels::conv_transpose2d_backward_weight(g32, x32, ws, cc.p).to_vector(), dw) < 1e-4);
  }
}

TEST_CASE("grouped conv2d on a batch split over several GEMM chunks matches a direct loop",
          "[conv][grouped]") {
  // Per group K * L = 24 * 4 * 4 * 63 * 63 = 1.5M of the CPU's 4M-element column buffer: two
  // samples per chunk, so three take a shared-buffer chunk and then a single-sample one.
  const Conv2dParams p{.padding = 1, .groups = 2};
  const Shape xs{3, 48, 64, 64}, ws{4, 24, 4, 4}, ys{3, 4, 63, 63};
  Tensor x = random_tensor(xs, 7), w = random_tensor(ws, 8), g = random_tensor(ys, 9);
  const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), gv = g.to_vector();
  std::vector<double> y = zeros(ys), dx = zeros(xs), dw = zeros(ws);
  for_each_tap(xs, ws, ys[2], ys[3], p, [&](size_t xi, size_t wi, size_t yi) {
    y[yi] += xv[xi] * wv[wi];
    dx[xi] += gv[yi] * wv[wi];
    dw[wi] += gv[yi] * xv[xi];
  });
  CHECK(max_abs_diff(kernels::conv2d(x, w, p).to_vector(), y) < 1e-11);
  CHECK(max_abs_diff(kernels::conv2d_backward_input(g, w, xs, p).to_vector(), dx) < 1e-11);
  CHECK(max_abs_diff(kernels::conv2d_backward_weight(g, x, ws, p).to_vector(), dw) < 1e-9);
}

TEST_CASE("grouped conv errors name the op, the shapes and the groups", "[conv][grouped][errors]") {
  Tensor x = Tensor::zeros({2, 6, 8, 8});
  // Input channels must be groups times the weight's.
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 2, 3, 3}), {.groups = 2}),
                    Catch::Contains("conv2d") && Catch::Contains("[2, 6, 8, 8]") &&
                        Catch::Contains("[4, 2, 3, 3]") && Catch::Contains("groups 2") &&
                        Catch::Contains("expects 4"));
  // Output channels must divide into the groups.
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 2, 3, 3}), {.groups = 3}),
                    Catch::Contains("conv2d") && Catch::Contains("[4, 2, 3, 3]") &&
                        Catch::Contains("not divisible by groups 3"));
  CHECK_THROWS_WITH(kernels::conv_transpose2d(x, Tensor::zeros({6, 2, 3, 3}), {.groups = 4}),
                    Catch::Contains("conv_transpose2d") && Catch::Contains("[2, 6, 8, 8]") &&
                        Catch::Contains("not divisible by groups 4"));
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 6, 3, 3}), {.dilation = 0}),
                    Catch::Contains("conv2d") && Catch::Contains("dilation 0"));
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 6, 3, 3}), {.groups = 0}),
                    Catch::Contains("conv2d") && Catch::Contains("groups 0"));
  // A dilated kernel spans dilation (k - 1) + 1 = 9 > 8 pixels.
  CHECK_THROWS_WITH(
      kernels::conv2d(x, Tensor::zeros({4, 6, 3, 3}), {.dilation = 4}),
      Catch::Contains("conv2d") && Catch::Contains("dilation 4") && Catch::Contains("does not fit"));
  // output_padding must stay below the stride or the dilation.
  CHECK_THROWS_WITH(
      kernels::conv_transpose2d(x, Tensor::zeros({6, 2, 3, 3}), {.output_padding = 2, .dilation = 2}),
      Catch::Contains("conv_transpose2d") && Catch::Contains("output_padding 2"));
  CHECK_THROWS_WITH(
      kernels::conv2d_backward_weight(Tensor::zeros({2, 4, 6, 6}), x, {4, 2, 3, 3}, {.groups = 2}),
      Catch::Contains("conv2d_backward_weight") && Catch::Contains("[4, 2, 3, 3]"));
}
