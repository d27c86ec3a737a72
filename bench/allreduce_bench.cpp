// allreduce_bench: in-place allreduce through a ProcessGroup, nccl-tests style.
//
//   mpirun -np 2 --oversubscribe build/bin/allreduce_bench [--backend mpi|nccl]
//       [--min-bytes 4K] [--max-bytes 256M] [--iters 20] [--warmup 5]
//       [--dtype float32|float64|float16|bfloat16] [--op sum|avg|max|min] [--raw]
//
// For each size (x4 from --min-bytes to --max-bytes): warm-up, then --iters allreduces
// issued back to back and waited for; the time per allreduce is averaged over ranks.
// algbw = bytes / time, busbw = algbw * 2(n-1)/n. Each size is then validated exactly
// (rank r contributes r + 1) and #wrong counts the wrong elements over all ranks; any wrong
// value makes the program exit 1. --raw (mpi backend, float32/float64) times a plain
// MPI_Allreduce loop on the same buffer beside it (interleaved: ours, raw, raw, ours, each
// half the iterations) and prints the busbw ratio ours / raw.
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/bench_harness.h"
#include "runtime/command_line.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/process_group.h"
#include "runtime/storage.h"

#if TANDEM_HAVE_CUDA
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda_check.h"
#include "runtime/dist/nccl_process_group.h"
#endif

using namespace tandem;
using namespace tandem::dist;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  Backend backend = Backend::mpi;
  int64_t min_bytes = int64_t{4} << 10;
  int64_t max_bytes = int64_t{256} << 20;
  int iters = 20;
  int warmup = 5;
  DType dtype = DType::f32;
  ReduceOp op = ReduceOp::sum;
  bool raw = false;
};

// The buffer under test: a host tensor, mirrored on the GPU for the nccl backend.
struct Buffer {
  Tensor host;
  Tensor tensor;  // what the collective sees

  void fill(double value) {
    host.fill_(value);
    upload();
  }
  void upload() {
    if (!tensor.shares_storage_with(host)) tensor.copy_(host);
  }
  void download() {
    if (!tensor.shares_storage_with(host)) host.copy_(tensor);
  }
};

int64_t count_wrong(const Tensor& host, double expected) {
  int64_t wrong = 0;
  for (double v : host.to_vector()) wrong += v != expected;
  return wrong;
}

double expected_value(ReduceOp op, int n) {
  switch (op) {
    case ReduceOp::sum:
      return n * (n + 1) / 2.0;
    case ReduceOp::avg:
      return (n + 1) / 2.0;
    case ReduceOp::max:
      return n;
    case ReduceOp::min:
      return 1;
  }
  return 0;
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double average_over_ranks(double value, int n) {
  double sum = 0;
  TANDEM_CHECK_MPI(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return sum / n;
}

struct Result {
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  int64_t wrong = 0;
};

Result finish(double local_seconds_per_op, size_t bytes, int n, int64_t local_wrong) {
  Result r;
  double t = average_over_ranks(local_seconds_per_op, n);
  r.time_us = t * 1e6;
  r.algbw = static_cast<double>(bytes) / t / 1e9;
  r.busbw = r.algbw * 2.0 * (n - 1) / n;
  r.wrong = bench::sum_over_ranks(local_wrong);
  return r;
}

// Seconds for `iters` allreduces through the group, issued back to back, then waited for.
double time_ours(ProcessGroup& group, Buffer& buf, const Options& o, int iters) {
  if (iters == 0) return 0;
  group.barrier("timing")->synchronize();
  std::vector<std::shared_ptr<Work>> works;
  works.reserve(static_cast<size_t>(iters));
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) works.push_back(group.allreduce(buf.tensor, o.op, "timed"));
  works.back()->synchronize();  // operations complete in issue order
  for (auto& w : works) w->synchronize();
  return seconds(start, Clock::now());
}

// Wrong elements after one allreduce of fresh data (rank r contributes r + 1).
int64_t check_ours(ProcessGroup& group, Buffer& buf, const Options& o) {
  buf.fill(group.rank() + 1);
  group.allreduce(buf.tensor, o.op, "check")->synchronize();
  buf.download();
  return count_wrong(buf.host, expected_value(o.op, group.size()));
}

// The baseline: plain MPI_Allreduce on MPI_COMM_WORLD from this thread (the group is idle
// meanwhile), on the same host buffer.
void reduce_raw(Buffer& buf, const Options& o, int n) {
  const int count = static_cast<int>(buf.host.numel());
  MPI_Datatype type = o.dtype == DType::f64 ? MPI_DOUBLE : MPI_FLOAT;
  MPI_Op op = o.op == ReduceOp::max ? MPI_MAX : o.op == ReduceOp::min ? MPI_MIN : MPI_SUM;
  TANDEM_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf.host.raw_data(), count, type, op, MPI_COMM_WORLD));
  if (o.op == ReduceOp::avg) {
    if (o.dtype == DType::f64) {
      double* p = buf.host.data<double>();
      for (int i = 0; i < count; ++i) p[i] /= n;
    } else {
      float* p = buf.host.data<float>();
      for (int i = 0; i < count; ++i) p[i] /= static_cast<float>(n);
    }
  }
}

double time_raw(ProcessGroup& group, Buffer& buf, const Options& o, int iters) {
  if (iters == 0) return 0;
  TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
  auto start = Clock::now();
  for (int i = 0; i < iters; ++i) reduce_raw(buf, o, group.size());
  return seconds(start, Clock::now());
}

int64_t check_raw(ProcessGroup& group, Buffer& buf, const Options& o) {
  buf.host.fill_(group.rank() + 1);
  reduce_raw(buf, o, group.size());
  return count_wrong(buf.host, expected_value(o.op, group.size()));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CommandLine cl("allreduce_bench",
                 "In-place allreduce through a ProcessGroup at sizes x4 from --min-bytes to --max-bytes,\n"
                 "nccl-tests style (time, algbw, busbw, #wrong); run it under mpirun.");
  cl.add_choice("--backend", &o.backend, {{"mpi", Backend::mpi}, {"nccl", Backend::nccl}}, "process group");
  cl.add_bytes("--min-bytes", &o.min_bytes, "smallest message");
  cl.add_bytes("--max-bytes", &o.max_bytes, "largest message");
  cl.add("--iters", &o.iters, "timed allreduces per size", 1);
  cl.add("--warmup", &o.warmup, "untimed allreduces per size first", 0);
  cl.add_choice(
      "--dtype", &o.dtype,
      {{"float32", DType::f32}, {"float64", DType::f64}, {"float16", DType::f16}, {"bfloat16", DType::bf16}},
      "element type");
  cl.add_choice(
      "--op", &o.op,
      {{"sum", ReduceOp::sum}, {"avg", ReduceOp::avg}, {"max", ReduceOp::max}, {"min", ReduceOp::min}},
      "reduction");
  cl.add_flag("--raw", &o.raw, "also time plain MPI_Allreduce on the same buffer (mpi, float32 or float64)");
  cl.parse(argc, argv);
  if (o.min_bytes > o.max_bytes) cl.exit_usage("--min-bytes is above --max-bytes");
  if (o.raw && (o.backend != Backend::mpi || (o.dtype != DType::f32 && o.dtype != DType::f64))) {
    cl.exit_usage("--raw compares with MPI_Allreduce: it needs --backend mpi and float32 or float64");
  }
  int64_t total_wrong = 0;
  double sum_busbw = 0, sum_raw_busbw = 0;
  int sizes = 0;
  bench::Bench plugin{.name = "allreduce_bench", .backend = o.backend, .wrong_label = "Out of bounds values"};
  plugin.header = [&](const bench::World& world) {
    std::printf("# allreduce_bench: backend %s, %d ranks, %s %s, in place, %d iterations after %d warm-up\n",
                backend_name(o.backend), world.size, dtype_name(o.dtype), reduce_op_name(o.op), o.iters,
                o.warmup);
    std::printf("# busbw = algbw * 2(n-1)/n; time averaged over ranks; #wrong summed over ranks\n#\n");
    std::vector<bench::Column> columns = {
        {12, "size", "(B)"},
        {12, "count", "(elements)"},
        {8, "type"},
        {6, "redop"},
        {10, "time", "(us)"},
        {8, "algbw", "(GB/s)"},
        {8, "busbw", "(GB/s)"},
        {7, "#wrong"},
    };
    if (o.raw) {
      columns.insert(columns.end(), {{1, "|", "|"},  // the bar between ours and plain MPI_Allreduce
                                     {10, "raw time", "(us)"},
                                     {8, "algbw", "(GB/s)"},
                                     {8, "busbw", "(GB/s)"},
                                     {7, "#wrong"},
                                     {6, "ratio"}});
    }
    bench::print_columns(columns);
  };
  plugin.rows = [&](const bench::World& world) {
    ProcessGroup& group = *world.group;
    const int n = world.size;
    Device device = Device::cpu();
#if TANDEM_HAVE_CUDA
    if (o.backend == Backend::nccl) {
      device = Device::cuda(static_cast<NcclProcessGroup&>(group).device());
      install_cuda_memory();
    }
#endif
    const size_t element_bytes = dtype_size(o.dtype);
    for (int64_t want = o.min_bytes; want <= o.max_bytes; want *= 4) {
      const int64_t count = want / static_cast<int64_t>(element_bytes);
      const size_t bytes = static_cast<size_t>(count) * element_bytes;
      Buffer buf;
      buf.host = Tensor::empty({count}, o.dtype);
      buf.tensor = device.is_cpu() ? buf.host : Tensor::empty({count}, o.dtype, device);
      buf.fill(group.rank() + 1);
      for (int i = 0; i < o.warmup; ++i) group.allreduce(buf.tensor, o.op, "warm-up")->synchronize();
      for (int i = 0; o.raw && i < o.warmup; ++i) reduce_raw(buf, o, n);
      // With --raw the two are timed in the order ours, raw, raw, ours (half the iterations
      // each time), so drift on a shared machine affects both alike.
      const int first = o.raw ? o.iters / 2 : o.iters;
      double t_ours = time_ours(group, buf, o, first);
      double t_raw = o.raw ? time_raw(group, buf, o, first) + time_raw(group, buf, o, o.iters - first) : 0;
      t_ours += time_ours(group, buf, o, o.iters - first);
      Result ours = finish(t_ours / o.iters, bytes, n, check_ours(group, buf, o));
      Result raw;
      if (o.raw) raw = finish(t_raw / o.iters, bytes, n, check_raw(group, buf, o));
      total_wrong += ours.wrong + raw.wrong;
      sum_busbw += ours.busbw;
      sum_raw_busbw += raw.busbw;
      ++sizes;
      if (world.root()) {
        std::printf("  %12zu %12lld %8s %6s %10.1f %8.2f %8.2f %7lld", bytes, static_cast<long long>(count),
                    dtype_name(o.dtype), reduce_op_name(o.op), ours.time_us, ours.algbw, ours.busbw,
                    static_cast<long long>(ours.wrong));
        if (o.raw) {
          std::printf(" | %10.1f %8.2f %8.2f %7lld", raw.time_us, raw.algbw, raw.busbw,
                      static_cast<long long>(raw.wrong));
          // busbw ours / raw (the same as raw time / our time); meaningless at one rank.
          if (n > 1)
            std::printf(" %6.2f", raw.time_us / ours.time_us);
          else
            std::printf(" %6s", "n/a");
        }
        std::printf("\n");
        std::fflush(stdout);
      }
      if (want > o.max_bytes / 4) break;  // the next x4 would pass the cap (or overflow)
    }
    return total_wrong;
  };
  plugin.footer = [&](const bench::World& world, int64_t) {
    std::printf("# Avg bus bandwidth    : %.3f GB/s", sum_busbw / sizes);
    if (o.raw) {
      std::printf(" (plain MPI_Allreduce %.3f GB/s", sum_raw_busbw / sizes);
      if (world.size > 1) std::printf("; ratio %.2f", sum_busbw / sum_raw_busbw);
      std::printf(")");
    }
    std::printf("\n");
  };
  return bench::run_bench(plugin);
}
