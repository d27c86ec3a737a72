// NcclProcessGroup: exact values (rank r contributes r + 1) for every op and dtype, stream
// gating, broadcast, allgather, barrier and subgroups. Runs with any GPU, ranks sharing it
// when there are fewer GPUs than ranks; skips with a message when cudaGetDeviceCount fails
// (no driver: error 35 on CI).
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <sstream>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda_check.h"
#include "runtime/dist/mpi_process_group.h"
#include "runtime/dist/nccl_process_group.h"
#include "runtime/storage.h"
#include "tests/mpi_gpu_skip.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

std::shared_ptr<NcclProcessGroup> world() {
  static std::shared_ptr<NcclProcessGroup> group = [] {
    auto g = std::dynamic_pointer_cast<NcclProcessGroup>(init_process_group(Backend::nccl));
    g->set_timeout(std::chrono::seconds(60));
    return g;
  }();
  return group;
}

// Host <-> device through plain CUDA copies, so the test needs no device-copy hook.
Tensor to_device(const Tensor& host, int device) {
  Tensor d = Tensor::empty(host.shape(), host.dtype(), Device::cuda(device));
  TANDEM_CHECK_CUDA(cudaMemcpy(d.raw_data(), host.raw_data(), host.bytes(), cudaMemcpyHostToDevice));
  return d;
}

Tensor to_host(const Tensor& dev) {
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  TANDEM_CHECK_CUDA(cudaMemcpy(h.raw_data(), dev.raw_data(), dev.bytes(), cudaMemcpyDeviceToHost));
  return h;
}

// Elements farther than `rel` (relative) from `expected`; 0 asks for exact values.
int64_t count_wrong(const Tensor& dev, double expected, std::string* first, double rel = 0) {
  std::vector<double> v = to_host(dev).to_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(std::abs(v[i] - expected) <= rel * std::abs(expected))) {
      if (bad++ == 0) {
        std::ostringstream os;
        os.precision(17);
        os << "element " << i << " is " << v[i] << ", expected " << expected;
        *first = os.str();
      }
    }
  }
  return bad;
}

#define CHECK_ALL_EQ(dev, value)                         \
  do {                                                   \
    std::string first_;                                  \
    int64_t bad_ = count_wrong((dev), (value), &first_); \
    INFO((dev).str() << ": " << first_);                 \
    CHECK(bad_ == 0);                                    \
  } while (0)

#define CHECK_ALL_NEAR(dev, value, rel)                         \
  do {                                                          \
    std::string first_;                                         \
    int64_t bad_ = count_wrong((dev), (value), &first_, (rel)); \
    INFO((dev).str() << ": " << first_);                        \
    CHECK(bad_ == 0);                                           \
  } while (0)

// Half a unit in the last place of 1.0: the relative rounding error of one operation.
double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return std::ldexp(1.0, -53);
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
    default:
      return std::ldexp(1.0, -24);
  }
}

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("nccl: allreduce is exact for every op, dtype and size", "[nccl]") {
  SKIP_WITHOUT_GPU();
  auto g = world();
  const int n = g->size();
  for (DType dtype : kDTypes) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      Tensor host = Tensor::full({count}, g->rank() + 1, dtype);
      Tensor sum = to_device(host, g->device()), avg = to_device(host, g->device());
      Tensor max = to_device(host, g->device()), min = to_device(host, g->device());
      std::vector<std::shared_ptr<Work>> works = {
          g->allreduce(sum, ReduceOp::sum, "sum"), g->allreduce(avg, ReduceOp::avg, "avg"),
          g->allreduce(max, ReduceOp::max, "max"), g->allreduce(min, ReduceOp::min, "min")};
      for (auto& w : works) w->synchronize();
      for (auto& w : works) CHECK(w->is_completed());
      CHECK_ALL_EQ(sum, n * (n + 1) / 2.0);
      if ((n & (n - 1)) == 0) {
        CHECK_ALL_EQ(avg, (n + 1) / 2.0);
      } else {  // ncclAvg scales by 1/n, inexact unless n is a power of two
        CHECK_ALL_NEAR(avg, (n + 1) / 2.0, 2 * n * unit_roundoff(dtype));
      }
      CHECK_ALL_EQ(max, static_cast<double>(n));
      CHECK_ALL_EQ(min, 1.0);
    }
  }
}

TEST_CASE("nccl: the group's stream is gated by the caller's stream both ways", "[nccl]") {
  SKIP_WITHOUT_GPU();
  auto g = world();
  const int n = g->size();
  cudaStream_t caller = nullptr;
  TANDEM_CHECK_CUDA(cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking));
  g->set_stream(caller);
  const int64_t count = 1 << 22;
  Tensor host = Tensor::full({count}, g->rank() + 1);
  Tensor back = Tensor::empty({count});
  Tensor dev = Tensor::empty({count}, DType::f32, Device::cuda(g->device()));
  // Everything below is queued on `caller` without the host waiting in between.
  TANDEM_CHECK_CUDA(
      cudaMemcpyAsync(dev.raw_data(), host.raw_data(), host.bytes(), cudaMemcpyHostToDevice, caller));
  auto work = g->allreduce(dev, ReduceOp::sum, "gated");
  work->wait();  // the caller's stream waits; the host does not
  TANDEM_CHECK_CUDA(
      cudaMemcpyAsync(back.raw_data(), dev.raw_data(), dev.bytes(), cudaMemcpyDeviceToHost, caller));
  TANDEM_CHECK_CUDA(cudaStreamSynchronize(caller));
  std::vector<double> v = back.to_vector();
  int64_t bad = 0;
  for (double x : v) bad += x != n * (n + 1) / 2.0;
  CHECK(bad == 0);
  g->set_stream(nullptr);
  TANDEM_CHECK_CUDA(cudaStreamDestroy(caller));
}

TEST_CASE("nccl: broadcast from every root, allgather and barrier", "[nccl]") {
  SKIP_WITHOUT_GPU();
  auto g = world();
  const int n = g->size();
  for (DType dtype : kDTypes) {
    for (int root = 0; root < n; ++root) {
      Tensor t = to_device(Tensor::full({1001}, g->rank() + 1, dtype), g->device());
      g->broadcast(t, root, "root")->synchronize();
      CHECK_ALL_EQ(t, root + 1.0);
    }
    Tensor in = to_device(Tensor::full({777}, g->rank() + 1, dtype), g->device());
    Tensor flat = Tensor::empty({n * 777}, dtype, Device::cuda(g->device()));
    g->allgather_flat(flat, in, "flat")->synchronize();
    std::vector<Tensor> outs;
    for (int q = 0; q < n; ++q) outs.push_back(Tensor::empty({777}, dtype, Device::cuda(g->device())));
    g->allgather(outs, in, "separate")->synchronize();
    for (int q = 0; q < n; ++q) {
      CHECK_ALL_EQ(flat.view_range(q * 777, {777}), q + 1.0);
      CHECK_ALL_EQ(outs[static_cast<size_t>(q)], q + 1.0);
    }
  }
  auto b = g->barrier("end");
  b->wait();  // a barrier's wait blocks the host
  CHECK(b->is_completed());
}

TEST_CASE("nccl: subgroups and argument errors", "[nccl]") {
  SKIP_WITHOUT_GPU();
  auto g = world();
  auto sub = g->new_subgroup({0});
  CHECK((sub != nullptr) == (g->rank() == 0));
  if (sub) {
    CHECK(sub->size() == 1);
    Tensor t = to_device(Tensor::full({5}, 3.0), g->device());
    sub->allreduce(t, ReduceOp::avg, "alone")->synchronize();
    CHECK_ALL_EQ(t, 3.0);
  }
  Tensor host = Tensor::zeros({4});
  CHECK_THROWS_WITH(g->allreduce(host, ReduceOp::sum, "x"), Catch::Contains("is not on cuda:"));
  Tensor t = to_device(host, g->device());
  CHECK_THROWS_WITH(g->broadcast(t, g->size(), "x"), Catch::Contains("is not a rank of process group"));
}

TEST_CASE("mpi group: CUDA tensors are staged through host memory", "[nccl][mpi]") {
  SKIP_WITHOUT_GPU();
  auto nccl = world();  // picks and sets this rank's device
  auto g = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "mpi with cuda tensors");
  const int n = g->size();
  for (DType dtype : kDTypes) {
    Tensor sum = to_device(Tensor::full({1000003}, g->rank() + 1, dtype), nccl->device());
    Tensor avg = to_device(Tensor::full({7}, g->rank() + 1, dtype), nccl->device());
    Tensor bcast = to_device(Tensor::full({7}, g->rank() + 1, dtype), nccl->device());
    Tensor in = to_device(Tensor::full({5}, g->rank() + 1, dtype), nccl->device());
    Tensor flat = Tensor::empty({n * 5}, dtype, Device::cuda(nccl->device()));
    std::vector<Tensor> outs;
    for (int q = 0; q < n; ++q) outs.push_back(Tensor::empty({5}, dtype, Device::cuda(nccl->device())));
    TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
    g->allreduce(sum, ReduceOp::sum, "staged sum")->wait();
    g->allreduce(avg, ReduceOp::avg, "staged avg")->wait();
    g->broadcast(bcast, n - 1, "staged broadcast")->wait();
    g->allgather_flat(flat, in, "staged flat")->wait();
    g->allgather(outs, in, "staged separate")->wait();
    CHECK_ALL_EQ(sum, n * (n + 1) / 2.0);
    CHECK_ALL_EQ(avg, (n + 1) / 2.0);
    CHECK_ALL_EQ(bcast, static_cast<double>(n));
    for (int q = 0; q < n; ++q) {
      CHECK_ALL_EQ(flat.view_range(q * 5, {5}), q + 1.0);
      CHECK_ALL_EQ(outs[static_cast<size_t>(q)], q + 1.0);
    }
  }
}
