// float32 GEMMs through oneDNN's matmul (kernels/cpu/gemm_onednn.h) against Eigen's GEMM,
// which kernels::gemm runs when the CPU backend is eigen; and the calls that stay Eigen's.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_onednn.h"
#include "kernels/gemm.h"
#include "runtime/rng.h"
#include "runtime/trace.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using kernels::cpu::CpuConvBackend;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t.to(dtype);
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
};

// C on one backend; `c` starts as `start` (so beta reads it).
Tensor product(CpuConvBackend backend, const Case& g, DType dtype, double alpha = 1.0, double beta = 0.0) {
  kernels::cpu::set_cpu_conv_backend(backend);
  const Tensor a = random_tensor(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, 1, dtype);
  const Tensor b = random_tensor(g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, 2, dtype);
  Tensor c = random_tensor({g.m, g.n}, 3, dtype);
  kernels::gemm(a, g.ta, b, g.tb, c, alpha, beta);
  kernels::cpu::reset_cpu_conv_backend();
  return c;
}

double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return diff / scale;
}

bool require_onednn() {
  if (!kernels::cpu::onednn_built()) WARN("oneDNN is not in this build (TANDEM_ONEDNN): nothing to compare");
  return kernels::cpu::onednn_built();
}

// The GAN models' Linear GEMMs (y = x W^T, dx = gy W, dW = gy^T x) and odd sizes.
const std::vector<Case> kMatrixCases = {
    {64, 256, 64, false, true},  {64, 64, 256, false, false}, {256, 64, 64, true, false},
    {64, 6272, 64, false, true}, {64, 6272, 1, false, false}, {6272, 64, 64, true, false},
    {3, 5, 7, false, false},     {5, 3, 2, true, true},       {17, 33, 9, true, false},
    {2, 2, 1, false, true},
};

}  // namespace

TEST_CASE("oneDNN GEMMs match Eigen's within 1e-5 and repeat bitwise", "[gemm][onednn]") {
  if (!require_onednn()) return;
  for (const Case& g : kMatrixCases) {
    CAPTURE(g.m, g.n, g.k, g.ta, g.tb);
    const Tensor eigen = product(CpuConvBackend::eigen, g, DType::f32);
    const Tensor onednn = product(CpuConvBackend::onednn, g, DType::f32);
    CHECK(relative_error(onednn, eigen) < 1e-5);
    CHECK(bitwise_equal(onednn, product(CpuConvBackend::onednn, g, DType::f32)));
  }
}

TEST_CASE("oneDNN GEMMs run only where they are faster; the other calls stay Eigen's, bitwise",
          "[gemm][onednn]") {
  if (!require_onednn()) return;
  SECTION("a vector output (m or n is 1)") {
    for (const Case& g :
         std::vector<Case>{{64, 1, 256, false, true}, {1, 256, 64, true, false}, {1, 1, 9, false, false}}) {
      CAPTURE(g.m, g.n, g.k);
      CHECK(bitwise_equal(product(CpuConvBackend::onednn, g, DType::f32),
                          product(CpuConvBackend::eigen, g, DType::f32)));
    }
  }
  const Case g{17, 33, 9, false, true};
  SECTION("float64") {
    CHECK(bitwise_equal(product(CpuConvBackend::onednn, g, DType::f64),
                        product(CpuConvBackend::eigen, g, DType::f64)));
  }
  SECTION("alpha and beta") {
    CHECK(bitwise_equal(product(CpuConvBackend::onednn, g, DType::f32, 0.5, 0.0),
                        product(CpuConvBackend::eigen, g, DType::f32, 0.5, 0.0)));
    CHECK(bitwise_equal(product(CpuConvBackend::onednn, g, DType::f32, 1.0, 1.0),
                        product(CpuConvBackend::eigen, g, DType::f32, 1.0, 1.0)));
  }
  SECTION("a matrix output goes to oneDNN: a span of the trace") {
    trace::start(0);
    product(CpuConvBackend::onednn, g, DType::f32);
    product(CpuConvBackend::onednn, {64, 1, 256, false, true}, DType::f32);
    trace::stop();
    int spans = 0;
    for (const trace::Event& e : trace::take_events()) spans += e.name == "oneDNN matmul";
    CHECK(spans == 1);
  }
}
