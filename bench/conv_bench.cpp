// CPU convolutions and Linear GEMMs: Eigen against oneDNN on the GAN models' layer shapes,
// in one run, one process.
// - Convolutions: every conv layer of dcgan (batch 64) and dcgan64 (batch 128), forward +
//   input gradient + weight gradient through kernels::conv2d / conv_transpose2d (the
//   backend switched with kernels/cpu/conv_onednn.h), Eigen (single-threaded, as it is built)
//   against oneDNN on 1 and 2 threads; each oneDNN result checked against Eigen's first.
// - Linear: y = x W^T, dx = gy W, dW = gy^T x on the mlp and dcgan Linear shapes, Eigen's
//   GEMM (kernels/gemm.h) against oneDNN's matmul primitive, 1 thread.
// Times are the best of --reps (after one warm-up), in milliseconds: the least disturbed
// by other processes on a shared machine.
// - bf16: oneDNN's bfloat16 convolutions against its float32 ones, pass by pass, on the
//   dcgan64 layers at batch 32 (bf16_rows).
//   conv_bench [--reps N] [--dcgan64-batch B] [--bf16-batch B] [--layout automatic|plain|preferred]
//              [--only conv|bf16|linear]
// Without oneDNN in the build it says so and exits 0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_harness.h"
#include "bench/relative_error.h"
#include "kernels/conv.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/gemm.h"
#include "runtime/command_line.h"
#include "runtime/rng.h"

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

using namespace tandem;
using kernels::cpu::CpuConvBackend;

namespace {

struct Options {
  int reps = 5;
  int64_t dcgan64_batch = 128;
  int64_t bf16_batch = 32;
  std::vector<int64_t> threads = {1, 2};
};

struct ConvLayer {
  const char* model;
  const char* name;
  bool transposed;
  Shape x, w;  // input and weight as the layer holds them
  int64_t stride, padding;
};

std::vector<ConvLayer> conv_layers(int64_t b64) {
  const int64_t b = 64, w = 64;
  return {
      {"dcgan", "G convT 128->64", true, {b, 128, 7, 7}, {128, 64, 4, 4}, 2, 1},
      {"dcgan", "G convT 64->1", true, {b, 64, 14, 14}, {64, 1, 4, 4}, 2, 1},
      {"dcgan", "D conv 1->64", false, {b, 1, 28, 28}, {64, 1, 4, 4}, 2, 1},
      {"dcgan", "D conv 64->128", false, {b, 64, 14, 14}, {128, 64, 4, 4}, 2, 1},
      {"dcgan64", "G convT 100->512", true, {b64, 100, 1, 1}, {100, 8 * w, 4, 4}, 1, 0},
      {"dcgan64", "G convT 512->256", true, {b64, 8 * w, 4, 4}, {8 * w, 4 * w, 4, 4}, 2, 1},
      {"dcgan64", "G convT 256->128", true, {b64, 4 * w, 8, 8}, {4 * w, 2 * w, 4, 4}, 2, 1},
      {"dcgan64", "G convT 128->64", true, {b64, 2 * w, 16, 16}, {2 * w, w, 4, 4}, 2, 1},
      {"dcgan64", "G convT 64->1", true, {b64, w, 32, 32}, {w, 1, 4, 4}, 2, 1},
      {"dcgan64", "D conv 1->64", false, {b64, 1, 64, 64}, {w, 1, 4, 4}, 2, 1},
      {"dcgan64", "D conv 64->128", false, {b64, w, 32, 32}, {2 * w, w, 4, 4}, 2, 1},
      {"dcgan64", "D conv 128->256", false, {b64, 2 * w, 16, 16}, {4 * w, 2 * w, 4, 4}, 2, 1},
      {"dcgan64", "D conv 256->512", false, {b64, 4 * w, 8, 8}, {8 * w, 4 * w, 4, 4}, 2, 1},
      {"dcgan64", "D conv 512->1", false, {b64, 8 * w, 4, 4}, {1, 8 * w, 4, 4}, 1, 0},
  };
}

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f32);
  fill_normal(t, 0, 1, gen);
  return t;
}

double best_ms(const std::function<void()>& fn, int reps) {
  fn();  // warm-up: oneDNN makes its primitives here
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return *std::min_element(ms.begin(), ms.end());
}

// One pass of a layer (0 forward, 1 input gradient, 2 weight gradient) on the backend in force.
Tensor conv_one_pass(const ConvLayer& l, int pass, const Tensor& x, const Tensor& w, const Tensor& gy) {
  kernels::Conv2dParams p{l.stride, l.padding, 0};
  if (l.transposed) {
    if (pass == 0) return kernels::conv_transpose2d(x, w, p);
    if (pass == 1) return kernels::conv_transpose2d_backward_input(gy, w, x.shape(), p);
    return kernels::conv_transpose2d_backward_weight(gy, x, w.shape(), p);
  }
  if (pass == 0) return kernels::conv2d(x, w, p);
  if (pass == 1) return kernels::conv2d_backward_input(gy, w, x.shape(), p);
  return kernels::conv2d_backward_weight(gy, x, w.shape(), p);
}

// Forward, input gradient and weight gradient of one layer on the backend in force.
std::vector<Tensor> conv_pass(const ConvLayer& l, const Tensor& x, const Tensor& w, const Tensor& gy) {
  return {conv_one_pass(l, 0, x, w, gy), conv_one_pass(l, 1, x, w, gy), conv_one_pass(l, 2, x, w, gy)};
}

int64_t conv_rows(const Options& o) {
  std::vector<bench::Column> columns = {{-8, "model"}, {-17, "layer"}, {-16, "input"}, {9, "eigen", "ms"}};
  std::vector<std::string> names;
  for (int64_t t : o.threads) names.push_back("onednn" + std::to_string(t) + "t");
  for (int64_t t : o.threads) names.push_back("ratio" + std::to_string(t) + "t");
  for (size_t i = 0; i < names.size(); ++i)
    columns.push_back({9, names[i].c_str(), i < o.threads.size() ? "ms" : "eigen/x"});
  columns.push_back({8, "relerr"});
  bench::print_columns(columns);
  int64_t wrong = 0;
  std::vector<double> total(o.threads.size() + 1, 0.0);
  for (const ConvLayer& l : conv_layers(o.dcgan64_batch)) {
    Tensor x = random_f32(l.x, 1), w = random_f32(l.w, 2);
    kernels::cpu::set_cpu_conv_backend(CpuConvBackend::eigen);
    kernels::Conv2dParams p{l.stride, l.padding, 0};
    Tensor gy =
        random_f32((l.transposed ? kernels::conv_transpose2d(x, w, p) : kernels::conv2d(x, w, p)).shape(), 3);
    std::vector<Tensor> want = conv_pass(l, x, w, gy);
    std::vector<double> ms = {best_ms([&] { conv_pass(l, x, w, gy); }, o.reps)};
    kernels::cpu::set_cpu_conv_backend(CpuConvBackend::onednn);
    double err = 0;
    for (int64_t t : o.threads) {
      kernels::cpu::set_cpu_conv_threads(static_cast<int>(t));
      std::vector<Tensor> got = conv_pass(l, x, w, gy);
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, bench::relative_error(got[i], want[i]));
      ms.push_back(best_ms([&] { conv_pass(l, x, w, gy); }, o.reps));
    }
    kernels::cpu::set_cpu_conv_threads(1);
    if (!(err < 1e-5)) ++wrong;
    std::string input = shape_str(l.x);
    std::printf("%-8s %-17s %-16s %9.2f", l.model, l.name, input.c_str(), ms[0]);
    for (size_t i = 1; i < ms.size(); ++i) std::printf(" %9.2f", ms[i]);
    for (size_t i = 1; i < ms.size(); ++i) std::printf(" %9.2f", ms[0] / ms[i]);
    std::printf(" %8.1e\n", err);
    for (size_t i = 0; i < ms.size(); ++i) total[i] += ms[i];
  }
  std::printf("%-8s %-17s %-16s %9.2f", "all", "", "", total[0]);
  for (size_t i = 1; i < total.size(); ++i) std::printf(" %9.2f", total[i]);
  for (size_t i = 1; i < total.size(); ++i) std::printf(" %9.2f", total[0] / total[i]);
  std::printf("\n\n");
  kernels::cpu::reset_cpu_conv_backend();
  return wrong;
}

// oneDNN's bfloat16 convolutions against its float32 ones, pass by pass, on dcgan64's layers
// at the batch of bench.sh's precision step (--bf16-batch, 32), 1 thread: what the
// convolutions alone allow a bf16 step (autograd/precision.h). The operands are rounded
// beforehand, so the times are the kernels' and their layout reorders, not the casts. Each
// bf16 result is checked against the float32 kernel on the same rounded operands (1e-4: the
// same products, float32 sums in another order). GFLOP/s counts 2 per multiply-add.
int64_t bf16_rows(const Options& o) {
  if (!kernels::cpu::onednn_bf16_native()) {
    std::printf("conv_bench: this CPU has no native bf16 (AVX512_BF16 or AMX); no bf16 table\n\n");
    return 0;
  }
  kernels::cpu::set_cpu_conv_backend(CpuConvBackend::onednn);
  kernels::cpu::set_cpu_conv_threads(1);
  bench::print_columns({{-17, "dcgan64 layer"},
                        {-6, "pass"},
                        {9, "fp32", "ms"},
                        {9, "bf16", "ms"},
                        {9, "ratio", "bf16/fp32"},
                        {9, "fp32", "GFLOP/s"},
                        {9, "bf16", "GFLOP/s"},
                        {8, "relerr"}});
  const char* pass_names[] = {"fwd", "dx", "dW"};
  int64_t wrong = 0;
  std::vector<double> pass_total(6, 0.0);  // fp32 and bf16 of each pass
  for (const ConvLayer& l : conv_layers(o.bf16_batch)) {
    if (std::string(l.model) != "dcgan64") continue;
    // Operands already on bf16's grid: float32 and bf16 multiply the same values.
    const Tensor x = random_f32(l.x, 1).to(DType::bf16), w = random_f32(l.w, 2).to(DType::bf16);
    const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32);
    kernels::Conv2dParams p{l.stride, l.padding, 0};
    const Tensor y = l.transposed ? kernels::conv_transpose2d(x32, w32, p) : kernels::conv2d(x32, w32, p);
    const Tensor gy = random_f32(y.shape(), 3).to(DType::bf16), gy32 = gy.to(DType::f32);
    // Multiply-adds, the same in each pass: every value of the convolution's output side (a
    // transposed layer's input) times the weight's taps per output channel (w[0] is that
    // side's channel count either way).
    const Shape& small = l.transposed ? l.x : y.shape();
    const double macs =
        static_cast<double>(shape_numel(small)) * static_cast<double>(shape_numel(l.w) / l.w[0]);
    for (int pass = 0; pass < 3; ++pass) {
      const Tensor want = conv_one_pass(l, pass, x32, w32, gy32);
      const Tensor got = conv_one_pass(l, pass, x, w, gy);
      const double err = bench::relative_error(got, want);
      if (!(err < 1e-4)) ++wrong;
      const double f_ms = best_ms([&] { conv_one_pass(l, pass, x32, w32, gy32); }, o.reps);
      const double b_ms = best_ms([&] { conv_one_pass(l, pass, x, w, gy); }, o.reps);
      std::printf("%-17s %-6s %9.2f %9.2f %9.2f %9.0f %9.0f %8.1e\n", l.name, pass_names[pass], f_ms, b_ms,
                  b_ms / f_ms, 2 * macs / f_ms / 1e6, 2 * macs / b_ms / 1e6, err);
      pass_total[2 * pass] += f_ms;
      pass_total[2 * pass + 1] += b_ms;
    }
  }
  for (int pass = 0; pass < 3; ++pass)
    std::printf("%-17s %-6s %9.2f %9.2f %9.2f\n", "all", pass_names[pass], pass_total[2 * pass],
                pass_total[2 * pass + 1], pass_total[2 * pass + 1] / pass_total[2 * pass]);
  const double f_all = pass_total[0] + pass_total[2] + pass_total[4];
  const double b_all = pass_total[1] + pass_total[3] + pass_total[5];
  std::printf("%-17s %-6s %9.2f %9.2f %9.2f\n\n", "all", "all", f_all, b_all, b_all / f_all);
  kernels::cpu::reset_cpu_conv_backend();
  return wrong;
}

#if TANDEM_HAVE_ONEDNN

// C [m, n] = op(A) op(B) through oneDNN's matmul, on row-major buffers (a transposed operand
// as strides), primitives made once.
class OnednnGemm {
 public:
  OnednnGemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {
    using dnnl::memory;
    const int64_t m = c.size(0), n = c.size(1), k = ta ? a.size(0) : a.size(1);
    memory::desc a_md({m, k}, memory::data_type::f32, ta ? memory::dims{1, m} : memory::dims{k, 1});
    memory::desc b_md({k, n}, memory::data_type::f32, tb ? memory::dims{1, k} : memory::dims{n, 1});
    memory::desc c_md({m, n}, memory::data_type::f32, memory::dims{n, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine_);
    primitive_ = dnnl::matmul(pd);
    a_ = memory(a_md, engine_, a.raw_data());
    b_ = memory(b_md, engine_, b.raw_data());
    c_ = memory(c_md, engine_, c.raw_data());
  }
  void run() {
    primitive_.execute(stream_, {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, c_}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  dnnl::matmul primitive_;
  dnnl::memory a_, b_, c_;
};

struct LinearLayer {
  const char* model;
  const char* name;
  int64_t batch, in, out;
};

int64_t linear_rows(const Options& o) {
  omp_set_num_threads(1);
  const std::vector<LinearLayer> layers = {
      {"mlp", "G 64->256", 64, 64, 256},   {"mlp", "G 256->256", 64, 256, 256},
      {"mlp", "G 256->784", 64, 256, 784}, {"mlp", "D 784->256", 64, 784, 256},
      {"mlp", "D 256->1", 64, 256, 1},     {"dcgan", "G 64->6272", 64, 64, 6272},
      {"dcgan", "D 6272->1", 64, 6272, 1},
  };
  bench::print_columns({{-8, "model"},
                        {-17, "layer"},
                        {-16, "gemm [m, n, k]"},
                        {9, "eigen", "ms"},
                        {9, "onednn", "ms"},
                        {9, "ratio", "eigen/x"},
                        {8, "relerr"}});
  int64_t wrong = 0;
  for (const LinearLayer& l : layers) {
    Tensor x = random_f32({l.batch, l.in}, 1), w = random_f32({l.out, l.in}, 2),
           gy = random_f32({l.batch, l.out}, 3);
    // The three GEMMs of a Linear layer, each timed on its own: y = x W^T, dx = gy W, dW = gy^T x.
    struct Gemm {
      const char* name;
      const Tensor &a, &b;
      bool ta, tb;
      Shape out;
    };
    const Gemm gemms[] = {{"y", x, w, false, true, {l.batch, l.out}},
                          {"dx", gy, w, false, false, {l.batch, l.in}},
                          {"dW", gy, x, true, false, {l.out, l.in}}};
    for (const Gemm& g : gemms) {
      Tensor eigen_out = Tensor::empty(g.out), onednn_out = Tensor::empty(g.out);
      OnednnGemm onednn(g.a, g.ta, g.b, g.tb, onednn_out);
      const double e_ms = best_ms([&] { kernels::gemm(g.a, g.ta, g.b, g.tb, eigen_out); }, o.reps * 4);
      const double d_ms = best_ms([&] { onednn.run(); }, o.reps * 4);
      const double err = bench::relative_error(onednn_out, eigen_out);
      if (!(err < 1e-5)) ++wrong;
      const int64_t k = g.ta ? g.a.size(0) : g.a.size(1);
      char dims[48];
      std::snprintf(dims, sizeof dims, "%s [%lld,%lld,%lld]", g.name, static_cast<long long>(g.out[0]),
                    static_cast<long long>(g.out[1]), static_cast<long long>(k));
      std::printf("%-8s %-17s %-16s %9.3f %9.3f %9.2f %8.1e\n", l.model, l.name, dims, e_ms, d_ms,
                  e_ms / d_ms, err);
    }
  }
  std::printf("\n");
  return wrong;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CommandLine cl("conv_bench",
                 "CPU convolutions (dcgan, dcgan64 layers; forward + both gradients) and Linear GEMMs:\n"
                 "Eigen against oneDNN, each oneDNN result checked against Eigen's.");
  cl.add("--reps", &o.reps, "timed repetitions per measurement; the best is reported", 1);
  cl.add("--dcgan64-batch", &o.dcgan64_batch, "batch of the dcgan64 layers (tandem-train's default: 128)", 1);
  std::string layout = "automatic";
  cl.add("--layout", &layout,
         "oneDNN's layouts: automatic (the default: plain for image-sized channel counts), plain (tandem's\n"
         "NCHW / OIHW) or preferred (oneDNN's blocked ones, with reorders)");
  std::string only;
  cl.add("--only", &only, "conv, bf16 or linear: that table alone (default: all three)");
  cl.add("--bf16-batch", &o.bf16_batch, "batch of the dcgan64 layers in the bf16 table", 1);
  cl.parse(argc, argv);
  TANDEM_CHECK(only.empty() || only == "conv" || only == "bf16" || only == "linear",
               "conv_bench: --only " << only << " is not conv, bf16 or linear");
  TANDEM_CHECK(layout == "automatic" || layout == "plain" || layout == "preferred",
               "conv_bench: --layout " << layout << " is not automatic, plain or preferred");
  kernels::cpu::set_onednn_layout(layout == "plain"       ? kernels::cpu::OnednnLayout::plain
                                  : layout == "preferred" ? kernels::cpu::OnednnLayout::preferred
                                                          : kernels::cpu::OnednnLayout::automatic);
  bench::Bench plugin{.name = "conv_bench",
                      .wrong_label = "#wrong (oneDNN off Eigen by more than 1e-5; bf16 off float32 by 1e-4)"};
  plugin.rows = [&](const bench::World&) -> int64_t {
    if (!kernels::cpu::onednn_built()) {
      std::printf("conv_bench: oneDNN is not in this build (TANDEM_ONEDNN); nothing to compare\n");
      return 0;
    }
    int64_t wrong = only.empty() || only == "conv" ? conv_rows(o) : 0;
    if (only.empty() || only == "bf16") wrong += bf16_rows(o);
#if TANDEM_HAVE_ONEDNN
    if (only.empty() || only == "linear") wrong += linear_rows(o);
#endif
    return wrong;
  };
  return bench::run_bench(plugin);
}
