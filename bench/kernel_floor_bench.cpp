// kernel_floor_bench: how close a GAN training step on the GPU comes to the floor of its own
// convolutions and GEMMs.
//
//   kernel_floor_bench [--model dcgan] [--batch N] [--steps 50] [--warmup 10] [--reps 20]
//       [--inner 5] [--cudnn off|on|benchmark] [--gemm-size 8192] [--no-validate]
//
// One process on cuda:0, the model alone (no wrapper, no communication). A step is
// GanModel::train_step (one D update, one G update, Adam) on one batch made once on the
// GPU (real uniform in [-1, 1], noise N(0, 1)), so the step time has no upload in it.
// 1. The step: --warmup steps (cuDNN plans chosen, the allocator's cache filled), then
//    --steps steps timed by the host clock between two device synchronisations, twice:
//    with the losses read on the host at every step, and kept on the device as
//    tandem-train's loop keeps them (GanModel::defer_log_reads; the figure compared with
//    the floor).
//    What they cost the host is counted meanwhile (runtime/host_cost.h: launches, host
//    waits with their call sites, allocator calls) and printed per step after the table,
//    with the host time until a step's calls return.
// 2. One more step with the kernel recorder on (kernels/kernel_recorder.h): every
//    convolution (op, shapes, parameters) and GEMM (m, n, k, transposes) it issues, with
//    how many times.
// 3. Each recorded kernel alone, on random operands of its shapes, through the same entry
//    point (cuDNN or im2col for a convolution, per --cudnn; cuBLAS for a GEMM): validated
//    once against its CPU twin (relative norm error <= 1e-4; --no-validate skips it), then
//    --reps times --inner back-to-back calls between CUDA events after a warm-up; the
//    median per call is reported.
// 4. The GPU's float32 GEMM rate: a --gemm-size square SGEMM through kernels::gemm
//    (cuBLAS, CUBLAS_COMPUTE_32F, no TF32).
// Prints a table in the style of nccl-tests (kernel, calls per step, us per call, us per
// step, GFLOP per call, TFLOP/s, #wrong), the floor (the sum of calls x us), the measured
// step against it and the achieved TFLOP/s against the SGEMM rate. GFLOP counts 2 x
// multiply-adds. Without a GPU (or without CUDA in the build) it prints one line saying it
// needs one and exits 0; it exits 1 when a kernel disagrees with its CPU twin.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_harness.h"
#include "bench/relative_error.h"
#include "kernels/conv.h"
#include "kernels/conv_algorithm.h"
#include "kernels/gemm.h"
#include "kernels/kernel_recorder.h"
#include "models/gan.h"
#include "models/wrapped_gan.h"
#include "runtime/command_line.h"
#include "runtime/host_cost.h"
#include "runtime/rng.h"

#if TANDEM_HAVE_CUDA
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#endif

using namespace tandem;

namespace {

struct Options {
  std::string model = "dcgan";
  int64_t batch = 0;  // 0: the model's usual batch (128 for dcgan64, else 64)
  int steps = 50;
  int warmup = 10;
  int reps = 20;
  int inner = 5;
  std::string cudnn;  // empty: TANDEM_CUDNN (default on)
  int64_t gemm_size = 8192;
  bool no_validate = false;
};

#if TANDEM_HAVE_CUDA

using kernels::ConvCall;
using kernels::ConvOp;
using kernels::GemmCall;

constexpr double kValidateLimit = 1e-4;

Tensor random_tensor(const Shape& shape, uint64_t seed, Device device = Device::cpu()) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f32);
  fill_uniform(t, -1.0, 1.0, gen);
  return device.is_cuda() ? t.to(device) : t;
}

using bench::relative_error;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Microseconds per call: `inner` back-to-back calls between two events (so the launch cost
// hides behind the kernels as in a step), median of `reps` after `warmup` calls.
double time_us(const std::function<void()>& fn, const Options& o) {
  for (int i = 0; i < std::max(1, o.warmup); ++i) fn();
  TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
  cuda::CudaEvent start(true), stop(true);
  std::vector<double> us;
  for (int r = 0; r < o.reps; ++r) {
    start.record();
    for (int i = 0; i < o.inner; ++i) fn();
    stop.record();
    stop.synchronize();
    us.push_back(1000.0 * stop.milliseconds_since(start) / o.inner);
  }
  return median(us);
}

// The call of a recorded convolution on operands a and b (on either device).
Tensor run_conv(const ConvCall& c, const Tensor& a, const Tensor& b) {
  switch (c.op) {
    case ConvOp::conv2d:
      return kernels::conv2d(a, b, c.params);
    case ConvOp::conv2d_backward_input:
      return kernels::conv2d_backward_input(a, b, c.out, c.params);
    case ConvOp::conv2d_backward_weight:
      return kernels::conv2d_backward_weight(a, b, c.out, c.params);
    case ConvOp::conv_transpose2d:
      return kernels::conv_transpose2d(a, b, c.params);
    case ConvOp::conv_transpose2d_backward_input:
      return kernels::conv_transpose2d_backward_input(a, b, c.out, c.params);
    case ConvOp::conv_transpose2d_backward_weight:
      return kernels::conv_transpose2d_backward_weight(a, b, c.out, c.params);
  }
  TANDEM_FAIL("kernel_floor_bench: unknown convolution op");
}

struct Row {
  std::string kernel;
  int64_t calls = 0;
  double us = 0;     // per call
  double flops = 0;  // per call
  int wrong = 0;
};

Row measure_conv(const ConvCall& c, int64_t calls, uint64_t seed, const Options& o) {
  Row row{c.str(), calls, 0, kernels::conv_call_flops(c), 0};
  Tensor a = random_tensor(c.a, seed), b = random_tensor(c.b, seed + 1);
  Tensor a_gpu = a.to(Device::cuda()), b_gpu = b.to(Device::cuda());
  if (!o.no_validate) {
    const double err = relative_error(run_conv(c, a_gpu, b_gpu), run_conv(c, a, b));
    if (!(err <= kValidateLimit)) {
      row.wrong = 1;
      std::printf("# %s: relative error %.2e against the CPU twin (limit %.0e)\n", row.kernel.c_str(), err,
                  kValidateLimit);
    }
  }
  row.us = time_us([&] { run_conv(c, a_gpu, b_gpu); }, o);
  return row;
}

Row measure_gemm(const GemmCall& g, int64_t calls, uint64_t seed, const Options& o) {
  Row row{g.str(), calls, 0, kernels::gemm_call_flops(g), 0};
  Tensor a = random_tensor(g.transpose_a ? Shape{g.k, g.m} : Shape{g.m, g.k}, seed);
  Tensor b = random_tensor(g.transpose_b ? Shape{g.n, g.k} : Shape{g.k, g.n}, seed + 1);
  Tensor a_gpu = a.to(Device::cuda()), b_gpu = b.to(Device::cuda());
  Tensor c_gpu = Tensor::empty({g.m, g.n}, DType::f32, Device::cuda());
  if (!o.no_validate) {
    Tensor c = Tensor::empty({g.m, g.n});
    kernels::gemm(a, g.transpose_a, b, g.transpose_b, c);
    kernels::gemm(a_gpu, g.transpose_a, b_gpu, g.transpose_b, c_gpu);
    const double err = relative_error(c_gpu, c);
    if (!(err <= kValidateLimit)) {
      row.wrong = 1;
      std::printf("# %s: relative error %.2e against the CPU twin (limit %.0e)\n", row.kernel.c_str(), err,
                  kValidateLimit);
    }
  }
  row.us = time_us([&] { kernels::gemm(a_gpu, g.transpose_a, b_gpu, g.transpose_b, c_gpu); }, o);
  return row;
}

// The device's float32 GEMM rate in TFLOP/s: one n x n x n SGEMM through cuBLAS, no TF32.
double sgemm_tflops(int64_t n, const Options& o) {
  Tensor a = random_tensor({n, n}, 11, Device::cuda()), b = random_tensor({n, n}, 12, Device::cuda());
  Tensor c = Tensor::empty({n, n}, DType::f32, Device::cuda());
  Options once = o;
  once.inner = 1;
  once.reps = std::max(3, o.reps / 4);
  once.warmup = 2;
  const double us = time_us([&] { kernels::gemm(a, false, b, false, c); }, once);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / (us * 1e6);
}

int64_t run(const Options& o) {
  const int64_t batch = o.batch > 0 ? o.batch : (o.model == "dcgan64" ? 128 : 64);
  cudaDeviceProp prop{};
  TANDEM_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));

  models::GanConfig config;
  config.model = o.model;
  config.seed = 7;
  std::shared_ptr<models::GanModel> model = models::make_gan(config);
  model->to(Device::cuda());  // before the optimizers take their handles
  models::WrappedGanOptions options;
  options.wrap = models::WrapMode::none;
  models::WrappedGan wrapped(model, nullptr, options);
  Shape real_shape = model->data_shape();
  real_shape.insert(real_shape.begin(), batch);
  Batch data;
  data.inputs = random_tensor(real_shape, 21, Device::cuda());
  {
    Generator gen(22);
    Tensor noise = Tensor::empty({batch, model->noise_dim()});
    fill_normal(noise, 0.0, 1.0, gen);
    data.targets = noise.to(Device::cuda());
  }
  int64_t iteration = 0;
  auto step = [&] {
    model->set_iteration(iteration++);
    Batch batch_copy = data;
    batch_copy.inputs = model->prepare_real(data.inputs);
    wrapped.train_step(batch_copy);
  };

  std::printf("# kernel_floor_bench on %s (%d SMs): model %s, batch %lld, convolutions %s (cuDNN %s)\n",
              prop.name, prop.multiProcessorCount, o.model.c_str(), static_cast<long long>(batch),
              kernels::conv_algorithm_mode_name(kernels::conv_algorithm_mode()),
              kernels::cudnn_built() ? "built in" : "not built");
  for (int i = 0; i < o.warmup; ++i) step();
  TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
  // The timed steps, with what they cost the host counted (runtime/host_cost.h): a step
  // whose host time (until its calls return) nears the step time is bound by the host.
  // Timed twice: with the losses kept on the device (tandem-train's loop) and read on the
  // host at every step (GanModel::defer_log_reads).
  double issue_s = 0;
  auto timed_steps = [&](bool defer) {
    model->defer_log_reads = defer;
    issue_s = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.steps; ++i) {
      const auto issue0 = std::chrono::steady_clock::now();
      step();
      issue_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - issue0).count();
    }
    TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
    return 1e6 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps;
  };
  const double read_step_us = timed_steps(false);
  host_cost::start();
  const double step_us = timed_steps(true);
  const host_cost::Record host = host_cost::stop();

  const kernels::ConvDispatchCounts before = kernels::conv_dispatch_counts();
  kernels::start_kernel_recording();
  step();
  TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
  const kernels::KernelRecord record = kernels::stop_kernel_recording();
  const kernels::ConvDispatchCounts after = kernels::conv_dispatch_counts();
  std::printf(
      "# one step: %zu distinct convolutions, %zu distinct GEMMs; convolution calls on cuDNN %llu, on "
      "im2col %llu\n",
      record.convs.size(), record.gemms.size(), static_cast<unsigned long long>(after.cudnn - before.cudnn),
      static_cast<unsigned long long>(after.im2col - before.im2col));

  std::vector<Row> rows;
  uint64_t seed = 1000;
  for (const auto& [call, count] : record.convs) rows.push_back(measure_conv(call, count, seed += 2, o));
  for (const auto& [call, count] : record.gemms) rows.push_back(measure_gemm(call, count, seed += 2, o));

  std::printf("#\n");
  bench::print_columns({{-96, "kernel"},
                        {6, "calls"},
                        {10, "us/call"},
                        {10, "us/step"},
                        {9, "GFLOP"},
                        {9, "TFLOP/s"},
                        {6, "#wrong"}});
  double floor_us = 0, step_flops = 0;
  int64_t wrong = 0;
  for (const Row& r : rows) {
    const double per_step = r.us * static_cast<double>(r.calls);
    floor_us += per_step;
    step_flops += r.flops * static_cast<double>(r.calls);
    wrong += r.wrong;
    std::printf("  %-96s %6lld %10.1f %10.1f %9.3f %9.2f %6d\n", r.kernel.c_str(),
                static_cast<long long>(r.calls), r.us, per_step, r.flops / 1e9, r.flops / (r.us * 1e6),
                r.wrong);
  }
  const double peak = sgemm_tflops(o.gemm_size, o);
  std::printf("#\n# kernel floor (sum of calls x us):    %10.1f us per step, %.3f GFLOP, %.2f TFLOP/s\n",
              floor_us, step_flops / 1e9, step_flops / (floor_us * 1e6));
  std::printf("# measured step (mean of %d steps):     %10.1f us, %.2f TFLOP/s; step / floor = %.2f\n",
              o.steps, step_us, step_flops / (step_us * 1e6), step_us / floor_us);
  std::printf("# ... with the losses read on the host at every step: %.1f us; step / floor = %.2f\n",
              read_step_us, read_step_us / floor_us);
  std::printf(
      "# float32 GEMM rate (%lld^3 SGEMM, cuBLAS, no TF32): %.2f TFLOP/s; step achieves %.1f%% of it, the "
      "floor %.1f%%\n",
      static_cast<long long>(o.gemm_size), peak, 100.0 * step_flops / (step_us * 1e6) / peak,
      100.0 * step_flops / (floor_us * 1e6) / peak);
  int64_t library_calls = 0;
  for (const Row& r : rows) library_calls += r.calls;
  std::printf("#\n# host time per step until its calls return: %10.1f us (step %.1f us, floor %.1f us)\n",
              1e6 * issue_s / o.steps, step_us, floor_us);
  std::printf("# cuBLAS/cuDNN calls per step:                %10lld\n",
              static_cast<long long>(library_calls));
  std::fputs(host_cost::per_step_table(host, o.steps, "# ").c_str(), stdout);
  return wrong;
}

#endif

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CommandLine cl("kernel_floor_bench",
                 "One GAN training step on the GPU against the floor of its own kernels: the step's\n"
                 "convolutions and GEMMs recorded, each timed alone (cuDNN / cuBLAS), summed, and compared\n"
                 "with the step and the GPU's float32 GEMM rate. Without a GPU it says so and exits 0.");
  cl.add_choice("--model", &o.model, models::gan_model_names(), "the GAN model (models/gan.h)");
  cl.add("--batch", &o.batch, "batch size (0: 128 for dcgan64, else 64)", 0);
  cl.add("--steps", &o.steps, "timed training steps", 1);
  cl.add("--warmup", &o.warmup, "untimed steps (and calls per kernel) first", 0);
  cl.add("--reps", &o.reps, "timed repetitions per kernel; the median is reported", 1);
  cl.add("--inner", &o.inner, "back-to-back calls per timed repetition", 1);
  cl.add("--cudnn", &o.cudnn, "convolution algorithms: off, on or benchmark (default: TANDEM_CUDNN, else on)",
         "MODE");
  cl.add("--gemm-size", &o.gemm_size, "n of the n x n x n SGEMM that measures the float32 GEMM rate", 256,
         32768);
  cl.add_flag("--no-validate", &o.no_validate, "skip checking each kernel against its CPU twin");
  cl.parse(argc, argv);
  try {  // a bad mode is a usage error, GPU or not
    if (!o.cudnn.empty())
      kernels::set_conv_algorithm_mode(kernels::parse_conv_algorithm_mode(o.cudnn, "--cudnn"));
    kernels::conv_algorithm_mode();  // and so is a bad TANDEM_CUDNN
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_floor_bench: %s (see --help)\n", e.what());
    return 2;
  }
  bench::Bench plugin{.name = "kernel_floor_bench",
                      .needs_gpu = true,
                      .wrong_label = "Wrong (kernels disagreeing with their CPU twins)"};
#if TANDEM_HAVE_CUDA
  plugin.rows = [&](const bench::World&) { return run(o); };
#endif
  return bench::run_bench(plugin);
}
