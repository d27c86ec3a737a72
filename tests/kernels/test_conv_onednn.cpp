// The oneDNN convolutions (kernels/cpu/conv_onednn.h) against the Eigen path (im2col +
// GEMM, itself checked against direct loops in test_conv_norm_pool.cpp), and grouped and
// dilated convolutions against a direct loop. Without oneDNN in the build the oneDNN cases
// say so and pass.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/conv_onednn.h"
#include "runtime/error.h"
#include "runtime/rng.h"
#include "runtime/trace.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using kernels::Conv2dParams;
using kernels::conv_detail::Geometry;
using kernels::cpu::CpuConvBackend;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t.to(DType::f32);
}

// max |got - want| / max |want|: the error relative to the result's scale.
double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  if (g.size() != w.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return INFINITY;
    diff = std::max(diff, std::abs(g[i] - w[i]));
    scale = std::max(scale, std::abs(w[i]));
  }
  return diff / std::max(scale, 1e-300);
}

// Sets the CPU convolution backend for a scope; afterwards TANDEM_CONV_BACKEND decides again.
struct BackendScope {
  explicit BackendScope(CpuConvBackend backend) { kernels::cpu::set_cpu_conv_backend(backend); }
  ~BackendScope() { kernels::cpu::reset_cpu_conv_backend(); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;
};

// Sets oneDNN's thread count for a scope, then restores it.
struct ThreadsScope {
  explicit ThreadsScope(int threads) : saved(kernels::cpu::cpu_conv_threads()) {
    kernels::cpu::set_cpu_conv_threads(threads);
  }
  ~ThreadsScope() { kernels::cpu::set_cpu_conv_threads(saved); }
  ThreadsScope(const ThreadsScope&) = delete;
  ThreadsScope& operator=(const ThreadsScope&) = delete;
  int saved;
};

bool require_onednn() {
  if (!kernels::cpu::onednn_built()) WARN("oneDNN is not in this build (TANDEM_ONEDNN): nothing to compare");
  return kernels::cpu::onednn_built();
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, padding, output_padding;
  int64_t dilation = 1, groups = 1;
};

// Batch 1, odd sizes, kernels 1, 3, 4 and 5, strides 1 to 3, with and without padding;
// output_padding for the transposed convolution.
const std::vector<ConvCase> kCases = {
    {2, 3, 5, 7, 4, 3, 1, 1, 0},    {1, 2, 6, 5, 3, 3, 2, 0, 1},  {1, 3, 8, 6, 2, 4, 2, 1, 0},
    {3, 1, 7, 7, 5, 4, 1, 0, 0},    {2, 5, 9, 11, 7, 5, 2, 2, 1}, {2, 4, 7, 7, 6, 1, 1, 0, 0},
    {1, 6, 13, 9, 3, 1, 2, 0, 1},   {4, 16, 8, 8, 8, 4, 2, 1, 0}, {3, 7, 11, 13, 5, 5, 3, 2, 2},
    {2, 8, 16, 16, 16, 3, 1, 1, 0}, {5, 3, 4, 4, 9, 4, 2, 1, 1},
};

// The six entry points on one backend, for one case: conv2d and its two backward kernels,
// conv_transpose2d and its two.
std::vector<Tensor> six_entry_points(const ConvCase& cc, CpuConvBackend backend) {
  BackendScope scope(backend);
  const int64_t cg = cc.c / cc.groups;
  Conv2dParams p{cc.stride, cc.padding, 0, cc.dilation, cc.groups};
  Tensor x = random_f32({cc.n, cc.c, cc.h, cc.w}, 11);
  Tensor w = random_f32({cc.o, cg, cc.k, cc.k}, 12);
  Tensor y = kernels::conv2d(x, w, p);
  Tensor gy = random_f32(y.shape(), 13);
  Tensor dx = kernels::conv2d_backward_input(gy, w, x.shape(), p);
  Tensor dw = kernels::conv2d_backward_weight(gy, x, w.shape(), p);
  // Transposed: its input has the conv's output channels, its weight is [c_in, c_out / groups, k, k].
  Conv2dParams pt{cc.stride, cc.padding, cc.output_padding, cc.dilation, cc.groups};
  Tensor xt = random_f32({cc.n, cc.o, cc.h, cc.w}, 14);
  Tensor wt = random_f32({cc.o, cg, cc.k, cc.k}, 15);
  Tensor yt = kernels::conv_transpose2d(xt, wt, pt);
  Tensor gyt = random_f32(yt.shape(), 16);
  Tensor dxt = kernels::conv_transpose2d_backward_input(gyt, wt, xt.shape(), pt);
  Tensor dwt = kernels::conv_transpose2d_backward_weight(gyt, xt, wt.shape(), pt);
  return {y, dx, dw, yt, dxt, dwt};
}

const char* const kEntryNames[] = {
    "conv2d",           "conv2d_backward_input",           "conv2d_backward_weight",
    "conv_transpose2d", "conv_transpose2d_backward_input", "conv_transpose2d_backward_weight"};

void check_against_eigen(const ConvCase& cc) {
  std::vector<Tensor> want = six_entry_points(cc, CpuConvBackend::eigen);
  std::vector<Tensor> got = six_entry_points(cc, CpuConvBackend::onednn);
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(kEntryNames[i]);
    REQUIRE(got[i].shape() == want[i].shape());
    CHECK(relative_error(got[i], want[i]) < 1e-5);
  }
}

// Grouped, dilated conv2d by direct loops, in double: y = conv(x, w), and for a gradient gy
// of y, dx = conv^T(gy, w) and dw = the weight gradient.
struct DirectConv {
  std::vector<double> y, dx, dw;
};

DirectConv direct_conv(const Tensor& x, const Tensor& w, const Tensor& gy, const Geometry& g,
                       int64_t dilation, int64_t groups) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), gv = gy.to_vector();
  DirectConv r{std::vector<double>(gv.size(), 0.0), std::vector<double>(xv.size(), 0.0),
               std::vector<double>(wv.size(), 0.0)};
  const int64_t cg = g.c / groups, og = g.o / groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oh = 0; oh < g.ho; ++oh)
        for (int64_t ow = 0; ow < g.wo; ++ow) {
          const size_t yi = static_cast<size_t>(((n * g.o + o) * g.ho + oh) * g.wo + ow);
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int64_t c = (o / og) * cg + ci;
            for (int64_t ki = 0; ki < g.kh; ++ki)
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t ih = oh * g.stride - g.padding + ki * dilation;
                const int64_t iw = ow * g.stride - g.padding + kj * dilation;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const size_t xi = static_cast<size_t>(((n * g.c + c) * g.h + ih) * g.w + iw);
                const size_t wi = static_cast<size_t>(((o * cg + ci) * g.kh + ki) * g.kw + kj);
                r.y[yi] += xv[xi] * wv[wi];
                r.dx[xi] += gv[yi] * wv[wi];
                r.dw[wi] += gv[yi] * xv[xi];
              }
          }
        }
  return r;
}

double relative_error(const Tensor& got, const std::vector<double>& want) {
  return relative_error(got, Tensor::from_values(got.shape(), want, DType::f64));
}

// The fixed convolution the determinism tests repeat, in this process or a child.
std::vector<Tensor> determinism_run() {
  BackendScope scope(CpuConvBackend::onednn);
  Conv2dParams p{2, 1, 0};
  Tensor x = random_f32({8, 32, 16, 16}, 21);
  Tensor w = random_f32({64, 32, 4, 4}, 22);
  Tensor y = kernels::conv2d(x, w, p);
  Tensor gy = random_f32(y.shape(), 23);
  return {y, kernels::conv2d_backward_input(gy, w, x.shape(), p),
          kernels::conv2d_backward_weight(gy, x, w.shape(), p)};
}

std::string bytes_of(const std::vector<Tensor>& tensors) {
  std::string out;
  for (const Tensor& t : tensors) out.append(static_cast<const char*>(t.raw_data()), t.bytes());
  return out;
}

}  // namespace

TEST_CASE("oneDNN convolutions match the Eigen path: all six entry points", "[conv][onednn]") {
  if (!require_onednn()) return;
  for (const ConvCase& cc : kCases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding, cc.output_padding);
    check_against_eigen(cc);
  }
}

TEST_CASE("oneDNN convolutions match the Eigen path on two threads", "[conv][onednn]") {
  if (!require_onednn()) return;
  ThreadsScope threads(2);
  for (const ConvCase& cc : {kCases[4], kCases[7], kCases[9]}) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding, cc.output_padding);
    check_against_eigen(cc);
  }
}

TEST_CASE("oneDNN convolutions match the Eigen path in plain and in preferred layouts", "[conv][onednn]") {
  if (!require_onednn()) return;
  // The default picks by channel count; here every case runs in each layout.
  for (auto layout : {kernels::cpu::OnednnLayout::plain, kernels::cpu::OnednnLayout::preferred}) {
    kernels::cpu::set_onednn_layout(layout);
    for (const ConvCase& cc : kCases) {
      CAPTURE(static_cast<int>(layout), cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding,
              cc.output_padding);
      check_against_eigen(cc);
    }
  }
  kernels::cpu::set_onednn_layout(kernels::cpu::OnednnLayout::automatic);
}

// Dilation and groups, as conv2d's Geometry carries them to either backend.
const std::vector<ConvCase> kGroupedCases = {
    {2, 4, 7, 6, 6, 3, 1, 1, 0, 2, 2}, {1, 6, 9, 8, 3, 3, 2, 2, 1, 1, 3},  {2, 4, 8, 7, 4, 3, 1, 1, 0, 1, 4},
    {3, 2, 9, 9, 4, 3, 2, 2, 1, 3, 1}, {1, 8, 10, 7, 4, 5, 1, 4, 0, 2, 2}, {2, 6, 6, 6, 6, 1, 2, 0, 1, 1, 6},
};

TEST_CASE("oneDNN grouped and dilated convolutions match direct loops", "[conv][onednn]") {
  if (!require_onednn()) return;
  BackendScope scope(CpuConvBackend::onednn);
  for (const ConvCase& cc : kGroupedCases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding, cc.dilation, cc.groups);
    const int64_t span = cc.dilation * (cc.k - 1) + 1;
    Geometry g{cc.n,
               cc.c,
               cc.h,
               cc.w,
               cc.o,
               cc.k,
               cc.k,
               (cc.h + 2 * cc.padding - span) / cc.stride + 1,
               (cc.w + 2 * cc.padding - span) / cc.stride + 1,
               cc.stride,
               cc.padding,
               cc.dilation,
               cc.groups};
    Tensor x = random_f32({cc.n, cc.c, cc.h, cc.w}, 31);
    Tensor w = random_f32({cc.o, cc.c / cc.groups, cc.k, cc.k}, 32);
    Tensor gy = random_f32({g.n, g.o, g.ho, g.wo}, 33);
    DirectConv want = direct_conv(x, w, gy, g, cc.dilation, cc.groups);
    Tensor y = Tensor::empty({g.n, g.o, g.ho, g.wo}, DType::f32);
    Tensor dx = Tensor::empty(x.shape(), DType::f32);
    Tensor dw = Tensor::empty(w.shape(), DType::f32);
    REQUIRE(kernels::cpu::onednn_conv_forward("test", x, w, y, g));
    REQUIRE(kernels::cpu::onednn_conv_backward_input("test", gy, w, dx, g));
    REQUIRE(kernels::cpu::onednn_conv_backward_weight("test", gy, x, dw, g));
    CHECK(relative_error(y, want.y) < 1e-5);
    CHECK(relative_error(dx, want.dx) < 1e-5);
    CHECK(relative_error(dw, want.dw) < 1e-5);
  }
}

TEST_CASE("oneDNN grouped and dilated convolutions match the Eigen path", "[conv][onednn]") {
  if (!require_onednn()) return;
  for (const ConvCase& cc : kGroupedCases) {
    CAPTURE(cc.n, cc.c, cc.h, cc.w, cc.o, cc.k, cc.stride, cc.padding, cc.output_padding, cc.dilation,
            cc.groups);
    check_against_eigen(cc);
  }
}

TEST_CASE("oneDNN leaves float64 and the eigen backend to Eigen", "[conv][onednn]") {
  Tensor x = random_f32({1, 2, 5, 5}, 41), w = random_f32({3, 2, 3, 3}, 42);
  Geometry g{1, 2, 5, 5, 3, 3, 3, 3, 3, 1, 0, 1, 1};
  Tensor y = Tensor::zeros({1, 3, 3, 3}, DType::f64);
  {
    BackendScope scope(CpuConvBackend::onednn);
    CHECK_FALSE(kernels::cpu::onednn_conv_forward("test", x.to(DType::f64), w.to(DType::f64), y, g));
  }
  Tensor y32 = Tensor::zeros({1, 3, 3, 3}, DType::f32);
  {
    BackendScope scope(CpuConvBackend::eigen);
    CHECK_FALSE(kernels::cpu::onednn_conv_forward("test", x, w, y32, g));
  }
  CHECK(y.to_vector() == std::vector<double>(27, 0.0));
  CHECK(y32.to_vector() == std::vector<double>(27, 0.0));
}

TEST_CASE("TANDEM_CONV_BACKEND picks the CPU convolution backend and rejects other values",
          "[conv][onednn]") {
  const char* saved = std::getenv("TANDEM_CONV_BACKEND");
  std::string saved_value = saved == nullptr ? "" : saved;
  kernels::cpu::reset_cpu_conv_backend();
  setenv("TANDEM_CONV_BACKEND", "eigen", 1);
  CHECK(kernels::cpu::cpu_conv_backend() == CpuConvBackend::eigen);
  kernels::cpu::reset_cpu_conv_backend();
  setenv("TANDEM_CONV_BACKEND", "onednn", 1);
  CHECK(kernels::cpu::cpu_conv_backend() == CpuConvBackend::onednn);
  kernels::cpu::reset_cpu_conv_backend();
  setenv("TANDEM_CONV_BACKEND", "mkl", 1);
  CHECK_THROWS_WITH(kernels::cpu::cpu_conv_backend(),
                    Catch::Contains("TANDEM_CONV_BACKEND=mkl") && Catch::Contains("eigen or onednn"));
  if (saved == nullptr) {
    unsetenv("TANDEM_CONV_BACKEND");
  } else {
    setenv("TANDEM_CONV_BACKEND", saved_value.c_str(), 1);
  }
  kernels::cpu::reset_cpu_conv_backend();
}

TEST_CASE("oneDNN convolutions are bitwise deterministic, call to call and on two threads",
          "[conv][onednn]") {
  if (!require_onednn()) return;
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    ThreadsScope scope(threads);
    std::vector<Tensor> first = determinism_run(), second = determinism_run();
    for (size_t i = 0; i < first.size(); ++i) CHECK(bitwise_equal(first[i], second[i]));
  }
}

// Run by the next test in a child process: writes determinism_run()'s bytes to the file
// TANDEM_ONEDNN_CHILD_OUT names.
TEST_CASE("oneDNN determinism child", "[.onednn_child]") {
  const char* path = std::getenv("TANDEM_ONEDNN_CHILD_OUT");
  REQUIRE(path != nullptr);
  std::ofstream(path, std::ios::binary) << bytes_of(determinism_run());
}

TEST_CASE("oneDNN convolutions give bitwise the same results in another process", "[conv][onednn]") {
  if (!require_onednn()) return;
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(len > 0);
  exe[len] = '\0';
  std::string path = "/tmp/tandem_onednn_child_" + std::to_string(getpid()) + ".bin";
  setenv("TANDEM_ONEDNN_CHILD_OUT", path.c_str(), 1);
  std::string command = std::string("'") + exe + "' '[.onednn_child]' > /dev/null";
  REQUIRE(std::system(command.c_str()) == 0);
  unsetenv("TANDEM_ONEDNN_CHILD_OUT");
  std::ifstream in(path, std::ios::binary);
  std::string child((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  std::string here = bytes_of(determinism_run());
  CHECK(child.size() == here.size());
  CHECK(child == here);
}

TEST_CASE("oneDNN's layout conversions and convolutions are spans of the trace", "[conv][onednn][trace]") {
  if (!require_onednn()) return;
  BackendScope onednn(CpuConvBackend::onednn);
  kernels::cpu::set_onednn_layout(kernels::cpu::OnednnLayout::preferred);  // blocked: reorders in and out
  Conv2dParams p;
  p.stride = 1;
  p.padding = 1;
  const Tensor x = random_f32({2, 16, 8, 8}, 41), w = random_f32({32, 16, 3, 3}, 42);
  trace::start(0);
  const Tensor y = kernels::conv2d(x, w, p);
  trace::stop();
  kernels::cpu::set_onednn_layout(kernels::cpu::OnednnLayout::automatic);
  int reorders_in = 0, reorders_out = 0, convolutions = 0;
  for (const trace::Event& e : trace::take_events()) {
    if (e.category != "kernel") continue;
    if (e.name == "oneDNN reorder in") {
      ++reorders_in;
      REQUIRE(!e.args.empty());
      CHECK(e.args[0].key == "bytes");
    }
    reorders_out += e.name == "oneDNN reorder out";
    convolutions += e.name == "oneDNN conv forward";
  }
  CHECK(reorders_in == 2);  // the input and the weight into the blocked layout
  CHECK(reorders_out == 1);
  CHECK(convolutions == 1);
  CHECK(y.shape() == Shape{2, 32, 8, 8});
}
