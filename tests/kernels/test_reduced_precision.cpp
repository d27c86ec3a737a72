// GEMMs and convolutions with bfloat16 and float16 operands (kernels/gemm.h, conv.h) against
// float64 on the same rounded operands: a product of two 16-bit floats is exact in float32,
// so the float32 result differs from the float64 one by the float32 accumulation alone. Both
// CPU paths are checked: oneDNN's bfloat16 kernels (where this CPU runs them natively) and
// the float32 kernels on the widened operands (backend eigen).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/gemm.h"
#include "kernels/reduced_precision.h"
#include "runtime/rng.h"

using namespace tandem;
using kernels::Conv2dParams;
using kernels::cpu::CpuConvBackend;

namespace {

// Normal draws rounded to `dtype`.
Tensor random_operand(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f32);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t.to(dtype);
}

// max |got - want| / max |want|.
double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  REQUIRE(g.size() == w.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return diff / scale;
}

struct BackendScope {
  explicit BackendScope(CpuConvBackend backend) { kernels::cpu::set_cpu_conv_backend(backend); }
  ~BackendScope() { kernels::cpu::reset_cpu_conv_backend(); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;
};

// float32 sums of up to a few hundred terms of size ~1: within 1e-5 of the scale. A wrong
// rounding of either operand (or a float16 read as bfloat16) is off by 1e-3 or more.
constexpr double kAccumulation = 1e-5;

}  // namespace

TEST_CASE("16-bit GEMMs give float32 results: the exact products, accumulated in float32",
          "[reduced_precision]") {
  for (CpuConvBackend backend : {CpuConvBackend::onednn, CpuConvBackend::eigen}) {
    BackendScope scope(backend);
    for (DType dtype : {DType::bf16, DType::f16}) {
      INFO(kernels::cpu::cpu_conv_backend_name(backend) << ", " << dtype_name(dtype));
      for (auto [ta, tb] : {std::pair{false, false}, std::pair{true, false}, std::pair{false, true}}) {
        const int64_t m = 17, k = 300, n = 9;
        const Tensor a = random_operand(ta ? Shape{k, m} : Shape{m, k}, dtype, 1);
        const Tensor b = random_operand(tb ? Shape{n, k} : Shape{k, n}, dtype, 2);
        const Tensor c = kernels::matmul(a, b, ta, tb);
        REQUIRE(c.dtype() == DType::f32);
        const Tensor want = kernels::matmul(a.to(DType::f64), b.to(DType::f64), ta, tb);
        CHECK(relative_error(c, want) < kAccumulation);
      }
      // Operands of two dtypes, or a 16-bit output, are refused by name.
      Tensor c16 = Tensor::empty({2, 2}, dtype);
      CHECK_THROWS_WITH(kernels::gemm(random_operand({2, 2}, dtype, 3), false,
                                      random_operand({2, 2}, dtype, 4), false, c16),
                        Catch::Contains("output dtype") && Catch::Contains("should be float32"));
    }
  }
}

TEST_CASE("16-bit convolutions give float32 results: the exact products, accumulated in float32",
          "[reduced_precision]") {
  if (kernels::cpu::onednn_built() && !kernels::cpu::onednn_bf16_native())
    WARN("this CPU has no native bfloat16: both backends run the widened float32 kernels");
  const Conv2dParams p{.stride = 2, .padding = 1};
  for (CpuConvBackend backend : {CpuConvBackend::onednn, CpuConvBackend::eigen}) {
    BackendScope scope(backend);
    for (DType dtype : {DType::bf16, DType::f16}) {
      INFO(kernels::cpu::cpu_conv_backend_name(backend) << ", " << dtype_name(dtype));
      const Tensor x = random_operand({3, 16, 9, 9}, dtype, 5);
      const Tensor w = random_operand({8, 16, 3, 3}, dtype, 6);
      const Tensor y = kernels::conv2d(x, w, p);
      REQUIRE(y.dtype() == DType::f32);
      const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64);
      CHECK(relative_error(y, kernels::conv2d(x64, w64, p)) < kAccumulation);
      const Tensor g = random_operand(y.shape(), dtype, 7), g64 = g.to(DType::f64);
      const Tensor dx = kernels::conv2d_backward_input(g, w, x.shape(), p);
      REQUIRE(dx.dtype() == DType::f32);
      CHECK(relative_error(dx, kernels::conv2d_backward_input(g64, w64, x.shape(), p)) < kAccumulation);
      const Tensor dw = kernels::conv2d_backward_weight(g, x, w.shape(), p);
      REQUIRE(dw.dtype() == DType::f32);
      CHECK(relative_error(dw, kernels::conv2d_backward_weight(g64, x64, w.shape(), p)) < kAccumulation);
      // A transposed convolution is the same three maps with the roles swapped.
      const Conv2dParams tp{.stride = 2, .padding = 1, .output_padding = 1};
      const Tensor wt = random_operand({16, 4, 4, 4}, dtype, 8), wt64 = wt.to(DType::f64);
      const Tensor yt = kernels::conv_transpose2d(x, wt, tp);
      REQUIRE(yt.dtype() == DType::f32);
      CHECK(relative_error(yt, kernels::conv_transpose2d(x64, wt64, tp)) < kAccumulation);
      const Tensor gt = random_operand(yt.shape(), dtype, 9), gt64 = gt.to(DType::f64);
      CHECK(relative_error(kernels::conv_transpose2d_backward_input(gt, wt, x.shape(), tp),
                           kernels::conv_transpose2d_backward_input(gt64, wt64, x.shape(), tp)) <
            kAccumulation);
      CHECK(relative_error(kernels::conv_transpose2d_backward_weight(gt, x, wt.shape(), tp),
                           kernels::conv_transpose2d_backward_weight(gt64, x64, wt.shape(), tp)) <
            kAccumulation);
    }
  }
}

TEST_CASE("float16 operands beyond 65504 are infinite, and so is what they reach", "[reduced_precision]") {
  Tensor a = Tensor::from_values({1, 2}, {70000.0, 1.0});
  const Tensor c = kernels::matmul(a.to(DType::f16), Tensor::ones({2, 1}, DType::f16));
  CHECK(std::isinf(c.to_vector()[0]));
  const Tensor cb = kernels::matmul(a.to(DType::bf16), Tensor::ones({2, 1}, DType::bf16));
  CHECK(std::isfinite(cb.to_vector()[0]));  // bfloat16 has float32's range
}

TEST_CASE("a run can say which kernels its 16-bit operands take", "[reduced_precision]") {
  using kernels::reduced_precision_kernels;
  for (bool gpu : {false, true}) {
    CHECK(reduced_precision_kernels(DType::f32, gpu).empty());
    CHECK(reduced_precision_kernels(DType::f64, gpu).empty());
  }
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    CHECK_THAT(reduced_precision_kernels(dtype, true), Catch::Contains("tensor cores"));
  }
  // On this CPU: bf16 natively where oneDNN has it, else (and fp16 always) float32 work that
  // says it is slower than float32.
  const std::string bf16 = reduced_precision_kernels(DType::bf16, false);
  if (kernels::cpu::onednn_takes(DType::bf16)) {
    CHECK_THAT(bf16, Catch::Contains("oneDNN's native bf16"));
  } else {
    CHECK_THAT(bf16, Catch::Contains("widened") && Catch::Contains("slower than fp32"));
  }
  CHECK_THAT(reduced_precision_kernels(DType::f16, false),
             Catch::Contains("widened") && Catch::Contains("slower than fp32"));
  // TANDEM_CONV_BACKEND=eigen keeps oneDNN out, bf16 included: the line says so.
  kernels::cpu::set_cpu_conv_backend(kernels::cpu::CpuConvBackend::eigen);
  CHECK_THAT(reduced_precision_kernels(DType::bf16, false), Catch::Contains("widened"));
  kernels::cpu::reset_cpu_conv_backend();
}
