// Single-thread float32 GEMM rate on the GAN's shapes (DESIGN.md §7 expects about
// 22 GFLOP/s with plain -O3 and 50-70 GFLOP/s with AVX2/FMA on the 2-core machine).
// Validates each shape against a naive triple loop before timing it.
//   matmul_bench [--iters N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "bench/bench_harness.h"
#include "kernels/gemm.h"
#include "runtime/command_line.h"
#include "runtime/rng.h"

using namespace tandem;

namespace {

struct Shape3 {
  int64_t m, k, n;
  bool ta, tb;
  const char* what;
};

double max_error_vs_naive(const Tensor& a, const Tensor& b, const Shape3& s) {
  Tensor c = kernels::matmul(a, b, s.ta, s.tb);
  double worst = 0;
  for (int64_t i = 0; i < s.m; i += 7) {
    for (int64_t j = 0; j < s.n; j += 5) {
      double sum = 0;
      for (int64_t p = 0; p < s.k; ++p) {
        double av = s.ta ? a.at(p * s.m + i) : a.at(i * s.k + p);
        double bv = s.tb ? b.at(j * s.k + p) : b.at(p * s.n + j);
        sum += av * bv;
      }
      worst = std::max(worst, std::abs(sum - c.at(i * s.n + j)) / (1.0 + std::abs(sum)));
    }
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 50;
  CommandLine cl("matmul_bench",
                 "Single-thread float32 GEMM rate on the GAN's shapes, each validated against a naive\n"
                 "triple loop before it is timed.");
  cl.add("--iters", &iters, "timed products per shape; the median is reported", 1);
  cl.parse(argc, argv);
  const std::vector<Shape3> shapes = {
      {256, 784, 256, false, false, "256x784x256 (issue reference)"},
      {64, 784, 256, false, true, "D l0 forward  x W^T"},
      {64, 256, 784, false, true, "G last forward"},
      {256, 64, 784, true, false, "D l0 weight grad  g^T x"},
      {64, 256, 256, false, true, "hidden 256x256"},
  };
  bench::Bench plugin{.name = "matmul_bench",
                      .wrong_label = "Wrong (shapes disagreeing with the naive product)"};
  plugin.header = [](const bench::World&) {
    std::printf("%-32s %8s %8s %8s %10s %10s %8s\n", "shape (m x k x n)", "m", "k", "n", "time(us)",
                "GFLOP/s", "maxerr");
  };
  plugin.rows = [&](const bench::World&) {
    Generator gen(1);
    int64_t bad = 0;
    for (const Shape3& s : shapes) {
      Tensor a = Tensor::empty(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k});
      Tensor b = Tensor::empty(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n});
      fill_normal(a, 0, 1, gen);
      fill_normal(b, 0, 1, gen);
      double err = max_error_vs_naive(a, b, s);
      if (err > 1e-4) ++bad;
      Tensor c = Tensor::empty({s.m, s.n});
      for (int w = 0; w < 3; ++w) kernels::gemm(a, s.ta, b, s.tb, c);
      std::vector<double> us;
      for (int r = 0; r < iters; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        kernels::gemm(a, s.ta, b, s.tb, c);
        us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      double median = us[us.size() / 2];
      double gflops = 2.0 * double(s.m) * double(s.k) * double(s.n) / (median * 1e3);
      std::printf("%-32s %8lld %8lld %8lld %10.1f %10.1f %8.1e\n", s.what, (long long)s.m, (long long)s.k,
                  (long long)s.n, median, gflops, err);
    }
    return bad;
  };
  return bench::run_bench(plugin);
}
