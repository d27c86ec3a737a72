// The Reducer on the GPU over NCCL, at 1-3 ranks (ranks share the GPU when there are
// fewer GPUs than ranks: runtime/dist/nccl_shared_device.h):
// - the single-process oracle for every MMGeneration style, static and dynamic GANs: N
//   GPU ranks on slices of the global batch end with the parameters of one GPU process
//   on the whole batch (and close to one CPU process), replicas bitwise identical;
// - overlap, in order: the first buckets' allreduces are enqueued before the first layer's
//   backward is issued and, on a GPU of its own, the first completes while most of the
//   backward still runs (CUDA events on the compute stream and the group's stream);
// - SyncBatchNorm over NCCL against BatchNorm on the global batch (sync_bn_oracle.h).
// Skips with a message without a GPU (as on CI).
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "autograd/function.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "reducer/ddp.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#include "runtime/dist/nccl_process_group.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_gpu_skip.h"
#include "tests/reducer/gan_fixture.h"
#include "tests/reducer/sync_bn_oracle.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::shared_ptr<dist::ProcessGroup> cpu_world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group(dist::Backend::mpi);
  return group;
}

std::shared_ptr<dist::NcclProcessGroup> gpu_world() {
  static std::shared_ptr<dist::NcclProcessGroup> group =
      std::dynamic_pointer_cast<dist::NcclProcessGroup>(dist::init_process_group(dist::Backend::nccl));
  return group;
}

// The default allreduce, with CUDA events: where the compute stream was when each bucket
// was launched, and when the bucket's allreduce finished on the group's stream.
class TimedAllreduceHook final : public CommHook {
 public:
  explicit TimedAllreduceHook(cudaStream_t comm_stream) : comm_stream_(comm_stream) {}
  std::string name() const override { return "timed allreduce"; }
  bool prescaled() const override { return true; }
  std::shared_ptr<dist::Work> launch(GradBucket& b) override {
    launched.push_back(std::make_unique<cuda::CudaEvent>(/*timing=*/true));
    launched.back()->record(cuda::compute_stream());
    b.bytes_sent = b.buffer.bytes();
    auto work = b.group->allreduce(b.buffer, dist::ReduceOp::sum, b.tag);
    reduced.push_back(std::make_unique<cuda::CudaEvent>(/*timing=*/true));
    reduced.back()->record(comm_stream_);
    return work;
  }
  void finish(GradBucket&) override {}
  void clear() {
    launched.clear();
    reduced.clear();
  }

  std::vector<std::unique_ptr<cuda::CudaEvent>> launched, reduced;

 private:
  cudaStream_t comm_stream_;
};

}  // namespace

TEST_CASE("GPU: GAN training in every MMGeneration style matches the single-process oracle",
          "[cuda][reducer][oracle]") {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(gpu_world()->device());
  for (bool dynamic : {false, true}) {
    std::vector<Tensor> on_cpu = train_gan(Style::none, dynamic, 6, nullptr);
    std::vector<Tensor> one_gpu = train_gan(Style::none, dynamic, 6, nullptr, gpu);
    require_close(one_gpu, on_cpu, 1e-4);
    for (Style style : kDistributedStyles) {
      INFO((dynamic ? "dynamic" : "static")
           << " GAN, " << style_name(style) << ", " << gpu_world()->size() << " GPU ranks");
      std::vector<Tensor> got = train_gan(style, dynamic, 6, gpu_world(), gpu);
      require_close(got, one_gpu, 1e-5);
      require_replicas_identical(got, *cpu_world());
    }
  }
}

TEST_CASE("GPU: SyncBatchNorm over NCCL on slices equals BatchNorm on the global batch",
          "[cuda][sync_batch_norm][oracle]") {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(gpu_world()->device());
  const int64_t global_n = 12;  // divisible by 1..3 ranks
  std::vector<int64_t> starts, counts;
  for (bool empty_first : {false, true}) {
    if (empty_first && gpu_world()->size() < 2) continue;
    INFO((empty_first ? "rank 0 holds no rows" : "equal slices")
         << ", " << gpu_world()->size() << " GPU ranks");
    sync_bn::slices(gpu_world()->size(), global_n, empty_first, starts, counts);
    sync_bn::check_against_oracle(2, starts, counts, global_n, gpu_world(), *cpu_world(), gpu);
    sync_bn::check_against_oracle(3, starts, counts, global_n, gpu_world(), *cpu_world(), gpu);
    sync_bn::check_against_oracle(4, starts, counts, global_n, gpu_world(), *cpu_world(), gpu);
  }
}

TEST_CASE("GPU: the first bucket's allreduce runs while the backward is still computing",
          "[cuda][reducer][overlap]") {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(gpu_world()->device());
  constexpr int64_t kWidth = 2048, kBatch = 2048, kLayers = 4;
  auto model = std::make_shared<DataParallelModel>();
  Generator gen(5);
  auto net = std::make_shared<nn::Sequential>();
  for (int64_t l = 0; l < kLayers; ++l) {
    net->push_back(std::make_shared<nn::Linear>(kWidth, kWidth, true, gen));
    net->push_back(std::make_shared<nn::Tanh>());
  }
  net->push_back(std::make_shared<nn::Linear>(kWidth, 1, true, gen));
  model->register_module("net", net);
  model->to(gpu);
  DdpOptions options;
  // A bucket closes once it reaches its cap: the last layer (8 KB) alone, then one
  // 2048 x 2048 layer (16 MB and its bias) per bucket.
  options.reducer.first_bucket_cap_mb = 0.004;
  options.reducer.bucket_cap_mb = 16.0;
  DistributedDataParallel ddp(model, gpu_world(), options);
  auto hook = std::make_shared<TimedAllreduceHook>(gpu_world()->comm_stream());
  ddp.reducer().register_comm_hook(hook);

  Tensor x = random_tensor({kBatch, kWidth}, 100 + gpu_world()->rank()).to(gpu);
  cuda::CudaEvent backward_start(/*timing=*/true);
  size_t launched_before_first_layer = 0;
  for (int step = 0; step < 3; ++step) {  // the layout settles after the first backward
    hook->clear();
    model->zero_grad();
    // A probe between the first layer and the rest: its backward runs after every later
    // layer's and before the first layer's, and notes how many buckets were launched then.
    Variable h = net->children()[1]->forward(net->children()[0]->forward(Variable(x)));
    h = make_result(h.data(), "probe", {h}, [&](const Tensor& g, const FunctionNode&) {
      launched_before_first_layer = hook->launched.size();
      return std::vector<Tensor>{g};
    });
    for (size_t m = 2; m < net->children().size(); ++m) h = net->children()[m]->forward(h);
    Variable loss = mean(square(h));
    backward_start.record(cuda::compute_stream());
    loss.backward();
  }
  TANDEM_CHECK_CUDA(cudaDeviceSynchronize());
  REQUIRE(hook->launched.size() == static_cast<size_t>(kLayers + 1));
  // In order on the host: the buckets of the last layer and of layers 4..2 were handed to
  // NCCL before the first layer's backward was even issued. Launching at the end of the
  // backward (no overlap) would leave 0 here.
  CHECK(launched_before_first_layer == static_cast<size_t>(kLayers));
  // On the device (compute stream): bucket 0 holds the last layer, whose gradients exist
  // first; the last bucket holds the first layer, whose gradients are the backward's last.
  const float backward_ms = hook->launched.back()->milliseconds_since(backward_start);
  const float after_first_launch_ms = hook->launched.back()->milliseconds_since(*hook->launched.front());
  const float first_done_before_end_ms = hook->launched.back()->milliseconds_since(*hook->reduced.front());
  INFO("backward " << backward_ms << " ms; bucket 0 launched " << after_first_launch_ms
                   << " ms before its end; bucket 0's allreduce finished " << first_done_before_end_ms
                   << " ms before its end");
  CHECK(after_first_launch_ms > 0);
  // Alone on its GPU, a rank runs most of its backward (four large layers of five) after
  // bucket 0's launch, and the allreduce finishes under it. Ranks sharing a GPU take turns
  // on it, so their device times include each other's work and the first bucket waits for
  // the other ranks' backward too: there only the order above is asserted.
  if (gpu_world()->size() == 1) {
    CHECK(after_first_launch_ms > 0.5f * backward_ms);
    CHECK(first_done_before_end_ms > 0);
  }
}
