// GPU kernel benchmark: memory-bound kernels against the device-to-device copy bandwidth,
// and our GEMM against cuBLAS called directly. Each kernel is first validated against its
// CPU twin on a small input; then timed with CUDA events (warm-up, median of the reps).
// GB/s counts the bytes a kernel reads plus the bytes it writes; %copy compares that with
// cudaMemcpyAsync device-to-device of the same size in the same run.
//   kernels_bench [--sizes 1M,4M,16M,64M,256M] [--reps N] [--warmup N] [--parts N]
// Without a GPU (or a CUDA build) it says so and exits 0; it exits 1 when a kernel
// disagrees with its CPU twin (bench/bench_harness.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_harness.h"
#include "bench/relative_error.h"
#include "kernels/activation.h"
#include "kernels/bucket_ops.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/optim.h"
#include "runtime/command_line.h"
#include "runtime/rng.h"

#if TANDEM_HAVE_CUDA
#include <cublas_v2.h>

#include "kernels/cuda/cublas_library.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#endif

using namespace tandem;

namespace {

struct Options {
  std::vector<int64_t> sizes = {1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20};  // bytes
  int reps = 20;
  int warmup = 5;
  int parts = 160;
};

#if TANDEM_HAVE_CUDA

Tensor random_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f32);
  fill_uniform(t, lo, hi, gen);
  return t;
}

Tensor gpu(const Tensor& t) { return t.to(Device::cuda()); }

using bench::relative_error;

// Median time in microseconds of one call, each bracketed by events and waited for.
double median_us(const std::function<void()>& fn, const Options& o) {
  for (int i = 0; i < o.warmup; ++i) fn();
  TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
  cuda::CudaEvent start(true), stop(true);
  std::vector<double> us;
  for (int r = 0; r < o.reps; ++r) {
    start.record();
    fn();
    stop.record();
    stop.synchronize();
    us.push_back(1000.0 * stop.milliseconds_since(start));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// A bucket of `count` float32 elements cut into `parts` tensors of varied sizes. With
// `odd`, every slot starts one element past a 16-byte boundary (the kernels' scalar path).
struct Bucket {
  std::vector<Tensor> parts;
  std::vector<int64_t> offsets, counts;
  int64_t flat_count = 0;
};

Bucket make_bucket(int64_t count, int parts, bool odd, Device device, uint64_t seed) {
  Bucket b;
  std::vector<double> weights(static_cast<size_t>(parts));
  double total = 0;
  for (int i = 0; i < parts; ++i) total += weights[static_cast<size_t>(i)] = 1.0 + (i * 7) % 11;
  int64_t at = odd ? 1 : 0, left = count;
  for (int i = 0; i < parts; ++i) {
    int64_t n =
        i + 1 == parts
            ? left
            : static_cast<int64_t>(static_cast<double>(count) * weights[static_cast<size_t>(i)] / total) / 4 *
                  4;
    n = std::max<int64_t>(0, std::min(n, left));
    left -= n;
    Tensor t = random_tensor({n}, seed + static_cast<uint64_t>(i));
    b.parts.push_back(device.is_cuda() ? gpu(t) : t);
    b.offsets.push_back(at);
    b.counts.push_back(n);
    at += (n + 3) / 4 * 4;
  }
  b.flat_count = at + 4;
  return b;
}

struct Row {
  std::string kernel;
  int64_t bytes;  // the size column: bytes of the data set
  int64_t count;  // elements
  double us;
  double moved;  // bytes read + written per call
};

void print_row(const Row& r, double copy_gbps) {
  const double gbps = r.moved / (r.us * 1e3);
  std::printf("%14s %12lld %12lld %10.1f %9.1f %7.1f\n", r.kernel.c_str(), static_cast<long long>(r.bytes),
              static_cast<long long>(r.count), r.us, gbps, 100.0 * gbps / copy_gbps);
}

// Validates every kernel against its CPU twin on a small input; returns the number wrong.
int validate(const Options& o) {
  int wrong = 0;
  auto report = [&](const char* what, double err, double limit) {
    const bool ok = err <= limit;
    if (!ok) ++wrong;
    std::printf("#   %-28s rel.err %9.2e  %s\n", what, err, ok ? "ok" : "WRONG");
  };
  auto guarded = [&](const char* what, const std::function<double()>& fn, double limit) {
    try {
      report(what, fn(), limit);
    } catch (const std::exception& e) {
      std::printf("#   %-28s skipped: %s\n", what, e.what());
    }
  };
  const int64_t n = 100003;
  guarded(
      "pack (scale 0.5)",
      [&] {
        Bucket c = make_bucket(n, o.parts, false, Device::cpu(), 1),
               g = make_bucket(n, o.parts, false, Device::cuda(), 1);
        Tensor fc = Tensor::zeros({c.flat_count}),
               fg = Tensor::zeros({g.flat_count}, DType::f32, Device::cuda());
        kernels::pack_(fc, c.parts, c.offsets, c.counts, 0.5);
        kernels::pack_(fg, g.parts, g.offsets, g.counts, 0.5);
        return relative_error(fg, fc);
      },
      0.0);
  guarded(
      "unpack (odd offsets)",
      [&] {
        Bucket c = make_bucket(n, o.parts, true, Device::cpu(), 2),
               g = make_bucket(n, o.parts, true, Device::cuda(), 2);
        Tensor flat = random_tensor({c.flat_count}, 9);
        kernels::unpack_(flat, c.parts, c.offsets, 2.0);
        kernels::unpack_(gpu(flat), g.parts, g.offsets, 2.0);
        double worst = 0;
        for (size_t i = 0; i < c.parts.size(); ++i)
          worst = std::max(worst, relative_error(g.parts[i], c.parts[i]));
        return worst;
      },
      0.0);
  guarded(
      "add",
      [&] {
        Tensor a = random_tensor({n}, 3), b = random_tensor({n}, 4);
        return relative_error(kernels::add(gpu(a), gpu(b)), kernels::add(a, b));
      },
      0.0);
  guarded(
      "relu",
      [&] {
        Tensor a = random_tensor({n}, 5);
        return relative_error(kernels::relu(gpu(a)), kernels::relu(a));
      },
      0.0);
  guarded(
      "adam (3 tensors, 2 steps)",
      [&] {
        std::vector<Tensor> pc, gc, mc, vc, pg, gg, mg, vg;
        for (int64_t k : {int64_t{1}, int64_t{7}, n}) {
          pc.push_back(random_tensor({k}, 10 + static_cast<uint64_t>(k)));
          gc.push_back(random_tensor({k}, 20 + static_cast<uint64_t>(k)));
          mc.push_back(Tensor::zeros({k}));
          vc.push_back(Tensor::zeros({k}));
          pg.push_back(gpu(pc.back()));
          gg.push_back(gpu(gc.back()));
          mg.push_back(gpu(mc.back()));
          vg.push_back(gpu(vc.back()));
        }
        for (int64_t t = 1; t <= 2; ++t) {
          kernels::AdamStep s{.lr = 1e-3, .weight_decay = 0.01, .step = t};
          kernels::adam_update_(pc, gc, mc, vc, s);
          kernels::adam_update_(pg, gg, mg, vg, s);
        }
        double worst = 0;
        for (size_t i = 0; i < pc.size(); ++i) worst = std::max(worst, relative_error(pg[i], pc[i]));
        return worst;
      },
      1e-6);
  guarded(
      "gemm 64x784x256 (A B^T)",
      [&] {
        Tensor a = random_tensor({64, 784}, 6), b = random_tensor({256, 784}, 7);
        return relative_error(kernels::matmul(gpu(a), gpu(b), false, true),
                              kernels::matmul(a, b, false, true));
      },
      1e-5);
  return wrong;
}

void bench_memory(const Options& o) {
  std::printf("#\n# memory-bound kernels, float32 (pack/unpack and adam over %d tensors unless noted)\n",
              o.parts);
  std::printf("%14s %12s %12s %10s %9s %7s\n", "kernel", "size(B)", "count", "time(us)", "GB/s", "%copy");
  for (int64_t bytes : o.sizes) {
    const int64_t count = bytes / 4;
    Tensor src = Tensor::empty({count}, DType::f32, Device::cuda());
    Tensor dst = Tensor::empty({count}, DType::f32, Device::cuda());
    src.zero_();
    const double copy_us = median_us(
        [&] {
          TANDEM_CHECK_CUDA(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), static_cast<size_t>(bytes),
                                            cudaMemcpyDeviceToDevice, cuda::compute_stream()));
        },
        o);
    const double copy_gbps = 2.0 * static_cast<double>(bytes) / (copy_us * 1e3);
    print_row({"copy (D2D)", bytes, count, copy_us, 2.0 * static_cast<double>(bytes)}, copy_gbps);
    src = Tensor();
    dst = Tensor();

    auto run = [&](const char* name, double moved, const std::function<void()>& fn) {
      try {
        print_row({name, bytes, count, median_us(fn, o), moved}, copy_gbps);
      } catch (const std::exception& e) {
        std::printf("%14s %12lld   skipped: %s\n", name, static_cast<long long>(bytes), e.what());
      }
    };
    const double b = static_cast<double>(bytes);
    // The default split; slots one element off 16-byte alignment (scalar path); and more
    // tensors than fit in a kernel argument (descriptors through the staging buffer).
    struct Split {
      const char* pack;
      const char* unpack;
      bool odd;
      int parts;
    };
    for (const Split& sp :
         {Split{"pack", "unpack", false, o.parts}, Split{"pack (odd)", "unpack (odd)", true, o.parts},
          Split{"pack (1024 t)", "unpack (1024 t)", false, 1024}}) {
      Bucket bucket = make_bucket(count, sp.parts, sp.odd, Device::cuda(), 11);
      Tensor flat = Tensor::zeros({bucket.flat_count}, DType::f32, Device::cuda());
      run(sp.pack, 2 * b, [&] { kernels::pack_(flat, bucket.parts, bucket.offsets, bucket.counts); });
      run(sp.unpack, 2 * b, [&] { kernels::unpack_(flat, bucket.parts, bucket.offsets); });
    }
    {
      Tensor a = Tensor::zeros({count}, DType::f32, Device::cuda());
      Tensor c = Tensor::zeros({count}, DType::f32, Device::cuda());
      run("add", 3 * b, [&] { Tensor out = kernels::add(a, c); });
      run("relu", 2 * b, [&] { Tensor out = kernels::relu(a); });
    }
    {
      // Adam over the same 160-way split: reads p, g, m, v and writes p, m, v.
      Bucket p = make_bucket(count, o.parts, false, Device::cuda(), 21);
      std::vector<Tensor> g, m, v;
      for (const Tensor& t : p.parts) {
        g.push_back(Tensor::zeros(t.shape(), DType::f32, Device::cuda()));
        m.push_back(Tensor::zeros(t.shape(), DType::f32, Device::cuda()));
        v.push_back(Tensor::zeros(t.shape(), DType::f32, Device::cuda()));
      }
      kernels::AdamStep s{.lr = 1e-4, .step = 1};
      run("adam", 7 * b, [&] { kernels::adam_update_(p.parts, g, m, v, s); });
    }
  }
}

void bench_gemm(const Options& o) {
  struct G {
    int64_t m, k, n;
    bool ta, tb;
  };
  const G shapes[] = {{64, 784, 256, false, true},   {64, 256, 784, false, true},
                      {256, 64, 784, true, false},   {64, 256, 256, false, true},
                      {256, 784, 256, false, false}, {4096, 4096, 4096, false, false}};
  std::printf(
      "#\n# gemm, float32 (CUBLAS_COMPUTE_32F, no TF32): ours (kernels::gemm) vs cublasGemmEx called "
      "directly\n");
  std::printf("%24s %10s %10s %10s %10s %7s\n", "m x k x n", "ours(us)", "TFLOP/s", "cuBLAS(us)", "TFLOP/s",
              "ratio");
  cublasHandle_t h = nullptr;
  TANDEM_CHECK_CUBLAS(kernels::cuda::cublas().create(&h));
  TANDEM_CHECK_CUBLAS(kernels::cuda::cublas().set_stream(h, cuda::compute_stream()));
  for (const G& s : shapes) {
    Tensor a = gpu(random_tensor(s.ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, 1));
    Tensor b = gpu(random_tensor(s.tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, 2));
    Tensor c = Tensor::empty({s.m, s.n}, DType::f32, Device::cuda());
    const double ours = median_us([&] { kernels::gemm(a, s.ta, b, s.tb, c); }, o);
    const float alpha = 1.0f, beta = 0.0f;
    const double direct = median_us(
        [&] {
          TANDEM_CHECK_CUBLAS(kernels::cuda::cublas().gemm_ex(
              h, s.tb ? CUBLAS_OP_T : CUBLAS_OP_N, s.ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(s.n),
              static_cast<int>(s.m), static_cast<int>(s.k), &alpha, b.raw_data(), CUDA_R_32F,
              static_cast<int>(b.size(1)), a.raw_data(), CUDA_R_32F, static_cast<int>(a.size(1)), &beta,
              c.raw_data(), CUDA_R_32F, static_cast<int>(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        },
        o);
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
    char label[64];
    std::snprintf(label, sizeof label, "%lldx%lldx%lld%s%s", static_cast<long long>(s.m),
                  static_cast<long long>(s.k), static_cast<long long>(s.n), s.ta ? " A^T" : "",
                  s.tb ? " B^T" : "");
    std::printf("%24s %10.1f %10.2f %10.1f %10.2f %7.2f\n", label, ours, flop / (ours * 1e6), direct,
                flop / (direct * 1e6), direct / ours);
  }
  kernels::cuda::cublas().destroy(h);
}

#endif  // TANDEM_HAVE_CUDA

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CommandLine cl(
      "kernels_bench",
      "GPU kernels, each validated against its CPU twin, then timed: memory-bound kernels against\n"
      "the device-to-device copy bandwidth, our GEMM against cuBLAS. Without a GPU it says so and\n"
      "exits 0.");
  cl.add_bytes_list("--sizes", &o.sizes, "data set sizes of the memory-bound kernels");
  cl.add("--reps", &o.reps, "timed calls per kernel; the median is reported", 1);
  cl.add("--warmup", &o.warmup, "untimed calls per kernel first", 0);
  cl.add("--parts", &o.parts, "tensors a bucket is cut into (pack, unpack, adam)", 1);
  cl.parse(argc, argv);
  bench::Bench plugin{.name = "kernels_bench",
                      .needs_gpu = true,
                      .wrong_label = "Wrong (kernels disagreeing with their CPU twins)"};
#if TANDEM_HAVE_CUDA
  plugin.header = [&](const bench::World&) {
    cudaDeviceProp prop{};
    TANDEM_CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("# kernels_bench on %s (%d SMs), median of %d reps after %d warm-ups\n", prop.name,
                prop.multiProcessorCount, o.reps, o.warmup);
  };
  plugin.rows = [&](const bench::World&) {
    std::printf("# validation against the CPU twins:\n");
    const int64_t wrong = validate(o);
    bench_memory(o);
    bench_gemm(o);
    return wrong;
  };
#endif
  return bench::run_bench(plugin);
}
