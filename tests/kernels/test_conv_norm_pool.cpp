// Convolution, batch norm and factor-2 resampling kernels against direct-loop references.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/conv.h"
#include "kernels/norm.h"
#include "kernels/pool.h"
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

// Element (a, b, c, d) of a 4-D shape.
int64_t idx(const Shape& s, int64_t a, int64_t b, int64_t c, int64_t d) {
  return ((a * s[1] + b) * s[2] + c) * s[3] + d;
}

// y[n, o, oh, ow] = sum over c, ki, kj of x[n, c, oh s - p + ki, ow s - p + kj] w[o, c, ki, kj].
std::vector<double> reference_conv2d(const Tensor& x, const Tensor& w, int64_t s, int64_t p,
                                     Shape& out_shape) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  int64_t ho = (xs[2] + 2 * p - ws[2]) / s + 1, wo = (xs[3] + 2 * p - ws[3]) / s + 1;
  out_shape = {xs[0], ws[0], ho, wo};
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(),
                      y(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t o = 0; o < ws[0]; ++o)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = 0;
          for (int64_t c = 0; c < xs[1]; ++c)
            for (int64_t ki = 0; ki < ws[2]; ++ki)
              for (int64_t kj = 0; kj < ws[3]; ++kj) {
                int64_t ih = oh * s - p + ki, iw = ow * s - p + kj;
                if (ih < 0 || ih >= xs[2] || iw < 0 || iw >= xs[3]) continue;
                acc += xv[static_cast<size_t>(idx(xs, n, c, ih, iw))] *
                       wv[static_cast<size_t>(idx(ws, o, c, ki, kj))];
              }
          y[static_cast<size_t>(idx(out_shape, n, o, oh, ow))] = acc;
        }
  return y;
}

// Each input pixel x[n, c, ih, iw] scatters x * w[c, o, ki, kj] to y[n, o, ih s - p + ki, iw s - p + kj].
std::vector<double> reference_conv_transpose2d(const Tensor& x, const Tensor& w, int64_t s, int64_t p,
                                               int64_t op, Shape& out_shape) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  int64_t ho = (xs[2] - 1) * s - 2 * p + ws[2] + op, wo = (xs[3] - 1) * s - 2 * p + ws[3] + op;
  out_shape = {xs[0], ws[1], ho, wo};
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(),
                      y(static_cast<size_t>(shape_numel(out_shape)), 0.0);
  for (int64_t n = 0; n < xs[0]; ++n)
    for (int64_t c = 0; c < xs[1]; ++c)
      for (int64_t ih = 0; ih < xs[2]; ++ih)
        for (int64_t iw = 0; iw < xs[3]; ++iw)
          for (int64_t o = 0; o < ws[1]; ++o)
            for (int64_t ki = 0; ki < ws[2]; ++ki)
              for (int64_t kj = 0; kj < ws[3]; ++kj) {
                int64_t oh = ih * s - p + ki, ow = iw * s - p + kj;
                if (oh < 0 || oh >= ho || ow < 0 || ow >= wo) continue;
                y[static_cast<size_t>(idx(out_shape, n, o, oh, ow))] +=
                    xv[static_cast<size_t>(idx(xs, n, c, ih, iw))] *
                    wv[static_cast<size_t>(idx(ws, c, o, ki, kj))];
              }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> av = a.to_vector(), bv = b.to_vector();
  REQUIRE(av.size() == bv.size());
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, padding;
};

// Stride 1 and 2, padding 0 and 1, kernel 3 and 4, square and non-square images.
const std::vector<ConvCase> kConvCases = {
    {2, 3, 5, 7, 4, 3, 1, 1}, {2, 2, 6, 5, 3, 3, 2, 0}, {1, 3, 8, 6, 2, 4, 2, 1},
    {3, 1, 7, 7, 5, 4, 1, 0}, {2, 2, 5, 4, 3, 3, 2, 1}, {2, 3, 9, 6, 2, 4, 2, 0},
};

}  // namespace

TEST_CASE("conv2d matches a direct-loop convolution", "[conv]") {
  for (const ConvCase& cc : kConvCases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding);
    Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, 1);
    Tensor w = random_tensor({cc.o, cc.c, cc.k, cc.k}, 2);
    Conv2dParams p{cc.stride, cc.padding, 0};
    Shape ref_shape;
    std::vector<double> ref = reference_conv2d(x, w, cc.stride, cc.padding, ref_shape);
    Tensor y = kernels::conv2d(x, w, p);
    REQUIRE(y.shape() == ref_shape);
    CHECK(max_abs_diff(y.to_vector(), ref) < 1e-12);
    Tensor y32 = kernels::conv2d(x.to(DType::f32), w.to(DType::f32), p);
    CHECK(y32.dtype() == DType::f32);
    CHECK(max_abs_diff(y32.to_vector(), ref) < 1e-4);
  }
}

TEST_CASE("conv2d backward kernels are the adjoints of the forward", "[conv]") {
  // <conv(x, w), g> = <x, backward_input(g, w)> = <w, backward_weight(g, x)>.
  for (const ConvCase& cc : kConvCases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding);
    Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, 3);
    Tensor w = random_tensor({cc.o, cc.c, cc.k, cc.k}, 4);
    Conv2dParams p{cc.stride, cc.padding, 0};
    Tensor y = kernels::conv2d(x, w, p);
    Tensor g = random_tensor(y.shape(), 5);
    double lhs = dot(y, g);
    Tensor dx = kernels::conv2d_backward_input(g, w, x.shape(), p);
    Tensor dw = kernels::conv2d_backward_weight(g, x, w.shape(), p);
    CHECK(dot(x, dx) == Approx(lhs).epsilon(1e-12).margin(1e-12));
    CHECK(dot(w, dw) == Approx(lhs).epsilon(1e-12).margin(1e-12));
  }
}

TEST_CASE("conv_transpose2d matches a direct-loop scatter, with output_padding", "[conv]") {
  struct Case {
    int64_t n, c, h, w, o, k, stride, padding, output_padding;
  };
  const std::vector<Case> cases = {
      {2, 3, 4, 5, 2, 3, 1, 1, 0}, {2, 2, 3, 4, 3, 4, 2, 1, 0}, {1, 3, 4, 3, 2, 3, 2, 1, 1},
      {2, 2, 5, 5, 3, 4, 2, 0, 1}, {3, 1, 3, 3, 2, 3, 1, 0, 0}, {2, 4, 7, 7, 2, 4, 2, 1, 0},
  };
  for (const Case& cc : cases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding, cc.output_padding);
    Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, 6);
    Tensor w = random_tensor({cc.c, cc.o, cc.k, cc.k}, 7);
    Conv2dParams p{cc.stride, cc.padding, cc.output_padding};
    Shape ref_shape;
    std::vector<double> ref =
        reference_conv_transpose2d(x, w, cc.stride, cc.padding, cc.output_padding, ref_shape);
    Tensor y = kernels::conv_transpose2d(x, w, p);
    REQUIRE(y.shape() == ref_shape);
    CHECK(max_abs_diff(y.to_vector(), ref) < 1e-12);
    CHECK(max_abs_diff(kernels::conv_transpose2d(x.to(DType::f32), w.to(DType::f32), p).to_vector(), ref) <
          1e-4);

    Tensor g = random_tensor(y.shape(), 8);
    double lhs = dot(y, g);
    CHECK(dot(x, kernels::conv_transpose2d_backward_input(g, w, x.shape(), p)) ==
          Approx(lhs).epsilon(1e-12).margin(1e-12));
    CHECK(dot(w, kernels::conv_transpose2d_backward_weight(g, x, w.shape(), p)) ==
          Approx(lhs).epsilon(1e-12).margin(1e-12));
  }
}

TEST_CASE("conv2d on a batch split over several GEMM chunks matches the reference", "[conv]") {
  // K * L = 32 * 4 * 4 * 64 * 64 = 2^21 columns' worth: two samples per chunk, so three
  // samples take one shared-buffer chunk and one single-sample chunk.
  Tensor x = random_tensor({3, 32, 64, 64}, 9);
  Tensor w = random_tensor({2, 32, 4, 4}, 10);
  Conv2dParams p{1, 1, 0};
  Shape ref_shape;
  std::vector<double> ref = reference_conv2d(x, w, 1, 1, ref_shape);
  Tensor y = kernels::conv2d(x, w, p);
  REQUIRE(y.shape() == ref_shape);
  CHECK(max_abs_diff(y.to_vector(), ref) < 1e-11);
  Tensor g = random_tensor(y.shape(), 11);
  double lhs = dot(y, g);
  CHECK(dot(x, kernels::conv2d_backward_input(g, w, x.shape(), p)) == Approx(lhs).epsilon(1e-11));
  CHECK(dot(w, kernels::conv2d_backward_weight(g, x, w.shape(), p)) == Approx(lhs).epsilon(1e-11));
}

TEST_CASE("conv shape errors name the op and both shapes", "[conv][errors]") {
  Tensor x = Tensor::zeros({2, 3, 8, 8});
  CHECK_THROWS_WITH(
      kernels::conv2d(x, Tensor::zeros({4, 2, 3, 3}), {}),
      Catch::Contains("conv2d") && Catch::Contains("[2, 3, 8, 8]") && Catch::Contains("[4, 2, 3, 3]"));
  CHECK_THROWS_WITH(kernels::conv_transpose2d(x, Tensor::zeros({2, 4, 3, 3}), {}),
                    Catch::Contains("conv_transpose2d") && Catch::Contains("[2, 3, 8, 8]") &&
                        Catch::Contains("[2, 4, 3, 3]"));
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 3, 11, 11}), {}),
                    Catch::Contains("conv2d") && Catch::Contains("does not fit"));
  CHECK_THROWS_WITH(kernels::conv_transpose2d(x, Tensor::zeros({3, 4, 3, 3}), {2, 1, 2}),
                    Catch::Contains("output_padding"));
  CHECK_THROWS_WITH(kernels::conv2d(x, Tensor::zeros({4, 3, 3, 3}, DType::f64), {}),
                    Catch::Contains("conv2d"));
}

TEST_CASE("batch_norm_train normalises per channel and updates the running statistics", "[norm]") {
  // x [4, 2]: channel 0 = {1, 2, 3, 6}, channel 1 = {-1, -1, 1, 1}.
  Tensor x = Tensor::from_values({4, 2}, {1, -1, 2, -1, 3, 1, 6, 1}, DType::f64);
  Tensor gamma = Tensor::from_values({2}, {2.0, 0.5}, DType::f64);
  Tensor beta = Tensor::from_values({2}, {0.25, -1.0}, DType::f64);
  Tensor running_mean = Tensor::zeros({2}, DType::f64);
  Tensor running_var = Tensor::ones({2}, DType::f64);
  kernels::BatchNormSaved saved;
  const double eps = 1e-5;
  Tensor y = kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1, eps, saved);
  // channel 0: mean 3, biased var (4 + 1 + 0 + 9) / 4 = 3.5, unbiased 14 / 3.
  // channel 1: mean 0, biased var 1, unbiased 4 / 3.
  CHECK(saved.mean.to_vector() == std::vector<double>{3.0, 0.0});
  CHECK(saved.inv_std.at(0) == Approx(1 / std::sqrt(3.5 + eps)).epsilon(1e-14));
  CHECK(saved.inv_std.at(1) == Approx(1 / std::sqrt(1.0 + eps)).epsilon(1e-14));
  CHECK(running_mean.at(0) == Approx(0.3).epsilon(1e-14));
  CHECK(running_mean.at(1) == Approx(0.0).margin(1e-15));
  CHECK(running_var.at(0) == Approx(0.9 + 0.1 * 14.0 / 3.0).epsilon(1e-14));
  CHECK(running_var.at(1) == Approx(0.9 + 0.1 * 4.0 / 3.0).epsilon(1e-14));
  const std::vector<double> xv = x.to_vector(), yv = y.to_vector();
  for (int i = 0; i < 4; ++i) {
    CHECK(yv[static_cast<size_t>(2 * i)] ==
          Approx((xv[static_cast<size_t>(2 * i)] - 3.0) / std::sqrt(3.5 + eps) * 2.0 + 0.25).epsilon(1e-13));
    CHECK(yv[static_cast<size_t>(2 * i + 1)] ==
          Approx(xv[static_cast<size_t>(2 * i + 1)] / std::sqrt(1.0 + eps) * 0.5 - 1.0).epsilon(1e-13));
  }
  // A second step moves the running statistics again from where they are.
  kernels::batch_norm_train(x, gamma, beta, running_mean, running_var, 0.1, eps, saved);
  CHECK(running_mean.at(0) == Approx(0.9 * 0.3 + 0.1 * 3.0).epsilon(1e-14));
  CHECK(running_var.at(1) == Approx(0.9 * (0.9 + 0.4 / 3.0) + 0.1 * 4.0 / 3.0).epsilon(1e-14));
}

TEST_CASE("batch_norm_train on NCHW gives per-channel zero mean and unit variance", "[norm]") {
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = random_tensor({3, 4, 5, 6}, 12, dtype);
    // Shift channel c by 10 c so a per-channel mean really is per channel.
    std::vector<double> xv = x.to_vector();
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = xv[i] * 2 + 10.0 * static_cast<double>((i / 30) % 4);
    x = Tensor::from_values(x.shape(), xv, dtype);
    Tensor running_mean = Tensor::zeros({4}, dtype), running_var = Tensor::ones({4}, dtype);
    kernels::BatchNormSaved saved;
    Tensor y = kernels::batch_norm_train(x, Tensor(), Tensor(), running_mean, running_var, 0.1, 1e-5, saved);
    std::vector<double> yv = y.to_vector();
    const double tol = dtype == DType::f64 ? 1e-10 : 1e-4;
    for (int64_t c = 0; c < 4; ++c) {
      double sum = 0, sq = 0, xsum = 0;
      for (int64_t n = 0; n < 3; ++n)
        for (int64_t j = 0; j < 30; ++j) {
          size_t k = static_cast<size_t>((n * 4 + c) * 30 + j);
          sum += yv[k];
          sq += yv[k] * yv[k];
          xsum += xv[k];
        }
      CHECK(sum / 90 == Approx(0.0).margin(tol));
      CHECK(sq / 90 == Approx(1.0).epsilon(1e-4));  // eps = 1e-5 makes it slightly below 1
      CHECK(saved.mean.at(c) == Approx(xsum / 90).epsilon(tol));
      CHECK(running_mean.at(c) == Approx(0.1 * xsum / 90).epsilon(tol));
    }
  }
}

TEST_CASE("batch_norm_eval uses the running statistics", "[norm]") {
  Tensor x = Tensor::from_values({2, 2, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::f64);
  Tensor gamma = Tensor::from_values({2}, {2.0, -1.0}, DType::f64);
  Tensor beta = Tensor::from_values({2}, {0.5, 0.0}, DType::f64);
  Tensor rm = Tensor::from_values({2}, {1.0, 4.0}, DType::f64);
  Tensor rv = Tensor::from_values({2}, {4.0, 0.25}, DType::f64);
  Tensor y = kernels::batch_norm_eval(x, gamma, beta, rm, rv, 0.0);
  // channel 0: (x - 1) / 2 * 2 + 0.5 = x - 0.5; channel 1: -(x - 4) / 0.5 = 8 - 2x.
  std::vector<double> expected = {0.5, 1.5, 2.0, 0.0, 4.5, 5.5, -6.0, -8.0};
  CHECK(max_abs_diff(y.to_vector(), expected) < 1e-14);
  CHECK_THROWS_WITH(
      kernels::batch_norm_eval(x, Tensor::ones({3}, DType::f64), beta, rm, rv, 0.0),
      Catch::Contains("batch_norm") && Catch::Contains("[3]") && Catch::Contains("[2, 2, 1, 2]"));
}

// kernels/cpu/norm.cpp sums several rows at once for speed: every row, in a block or in the
// remainder after the blocks (15 rows here: a block of 8 and 7 more), must count once with
// its own channel's terms. The reference is one plain loop per row, in the same order, and
// the float32 results must match it bitwise.
TEST_CASE("batch norm statistics and parameter gradients equal the plain row loops' sums, bitwise",
          "[norm]") {
  const Shape shape{3, 5, 7, 9};
  const int64_t n = 3, c = 5, inner = 63;
  const Tensor x = random_tensor(shape, 41, DType::f32), grad = random_tensor(shape, 42, DType::f32);
  const float* px = x.data<float>();
  const float* pg = grad.data<float>();
  std::vector<double> mean(c, 0.0), var(c, 0.0), sum_g(c, 0.0), sum_gx(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      double acc = 0;
      for (int64_t j = 0; j < inner; ++j) acc += px[(i * c + ch) * inner + j];
      mean[ch] += acc;
    }
  for (double& m : mean) m /= static_cast<double>(n * inner);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      double acc = 0;
      for (int64_t j = 0; j < inner; ++j) {
        const double d = px[(i * c + ch) * inner + j] - mean[ch];
        acc += d * d;
      }
      var[ch] += acc;
    }
  Tensor rm, rv;
  kernels::BatchNormSaved saved;
  kernels::batch_norm_train(x, Tensor(), Tensor(), rm, rv, 0.1, 1e-5, saved);
  for (int64_t ch = 0; ch < c; ++ch) {
    CHECK(saved.mean.data<float>()[ch] == static_cast<float>(mean[ch]));
    CHECK(saved.inv_std.data<float>()[ch] ==
          static_cast<float>(1.0 / std::sqrt(var[ch] / static_cast<double>(n * inner) + 1e-5)));
  }
  const float* sm = saved.mean.data<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch) {
      double g_acc = 0, gx_acc = 0;
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t e = (i * c + ch) * inner + j;
        g_acc += pg[e];
        gx_acc += pg[e] * (px[e] - static_cast<double>(sm[ch]));
      }
      sum_g[ch] += g_acc;
      sum_gx[ch] += gx_acc * saved.inv_std.data<float>()[ch];
    }
  const kernels::BatchNormGrads d = kernels::batch_norm_backward(grad, x, Tensor(), saved);
  for (int64_t ch = 0; ch < c; ++ch) {
    CHECK(d.beta.data<float>()[ch] == static_cast<float>(sum_g[ch]));
    CHECK(d.gamma.data<float>()[ch] == static_cast<float>(sum_gx[ch]));
  }
}

// norm.h: a bfloat16 input (a rounded operand) is read widened; every other operand is
// float32, and a mismatch is an error naming the operand and both dtypes.
TEST_CASE("batch norm kernels on a bfloat16 input give those of its float32 widening", "[norm]") {
  const Tensor x = random_tensor({3, 2, 4, 5}, 31, DType::f32).to(DType::bf16);
  const Tensor wide = x.to(DType::f32), grad = random_tensor({3, 2, 4, 5}, 32, DType::f32);
  const Tensor gamma = Tensor::from_values({2}, {1.5, -0.5}), beta = Tensor::from_values({2}, {0.25, 1.0});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2}), rm_wide = rm.clone(), rv_wide = rv.clone();
  kernels::BatchNormSaved saved, saved_wide;
  const Tensor y = kernels::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, saved);
  const Tensor y_wide = kernels::batch_norm_train(wide, gamma, beta, rm_wide, rv_wide, 0.1, 1e-5, saved_wide);
  CHECK(y.dtype() == DType::f32);
  CHECK(max_abs_diff(y.to_vector(), y_wide.to_vector()) == 0);
  CHECK(max_abs_diff(rv.to_vector(), rv_wide.to_vector()) == 0);
  const kernels::BatchNormGrads d = kernels::batch_norm_backward(grad, x, gamma, saved);
  const kernels::BatchNormGrads d_wide = kernels::batch_norm_backward(grad, wide, gamma, saved_wide);
  CHECK(d.x.dtype() == DType::f32);
  CHECK(max_abs_diff(d.x.to_vector(), d_wide.x.to_vector()) == 0);
  CHECK(max_abs_diff(d.gamma.to_vector(), d_wide.gamma.to_vector()) == 0);
  CHECK(max_abs_diff(kernels::batch_norm_eval(x, gamma, beta, rm, rv, 1e-5).to_vector(),
                     kernels::batch_norm_eval(wide, gamma, beta, rm, rv, 1e-5).to_vector()) == 0);
  CHECK_THROWS_WITH(kernels::batch_norm_backward(grad.to(DType::bf16), x, gamma, saved),
                    Catch::Contains("batch_norm_backward") && Catch::Contains("gradient is bfloat16") &&
                        Catch::Contains("needs float32"));
  CHECK_THROWS_WITH(kernels::batch_norm_eval(x, gamma.to(DType::bf16), beta, rm, rv, 1e-5),
                    Catch::Contains("gamma is bfloat16"));
}

TEST_CASE("upsample_nearest2x and avg_pool2x values and backwards", "[pool]") {
  Tensor x = Tensor::from_values({1, 2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::f64);
  Tensor up = kernels::upsample_nearest2x(x);
  REQUIRE(up.shape() == Shape{1, 2, 4, 4});
  CHECK(up.to_vector() == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4,
                                              5, 5, 6, 6, 5, 5, 6, 6, 7, 7, 8, 8, 7, 7, 8, 8});
  // The adjoint of repetition sums each block.
  Tensor g = Tensor::from_values({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::f64);
  CHECK(kernels::upsample_nearest2x_backward(g).to_vector() == std::vector<double>{14, 22});

  Tensor a = Tensor::from_values({1, 1, 2, 4}, {1, 2, 3, 4, 5, 6, 7, 8}, DType::f32);
  Tensor pooled = kernels::avg_pool2x(a);
  REQUIRE(pooled.shape() == Shape{1, 1, 1, 2});
  CHECK(pooled.to_vector() == std::vector<double>{3.5, 5.5});
  Tensor pg = Tensor::from_values({1, 1, 1, 2}, {4, 8}, DType::f32);
  CHECK(kernels::avg_pool2x_backward(pg).to_vector() == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2});
  // Pooling undoes upsampling.
  CHECK(kernels::avg_pool2x(up).to_vector() == x.to_vector());
  CHECK_THROWS_WITH(kernels::avg_pool2x(Tensor::zeros({1, 1, 3, 4})),
                    Catch::Contains("avg_pool2x") && Catch::Contains("[1, 1, 3, 4]"));
}
