// Batches uploaded from pinned memory on a copy stream: bitwise the synchronous upload,
// also while the compute stream is busy and the caching allocator hands the freed blocks
// of earlier batches out again. Labels travel with them, and the sampler's batches on the
// device are its CPU batches.
#include <cstring>

#include "kernels/elementwise.h"
#include "models/data/dataset.h"
#include "models/data/sampler.h"
#include "models/train/batch_maker.h"
#include "models/train/batch_prefetcher.h"
#include "runtime/cuda/async_upload.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// Byte for byte, after copying the GPU tensor back synchronously.
bool same_bytes(const Tensor& gpu, const Tensor& cpu) {
  Tensor back = gpu.to(Device::cpu());
  return back.shape() == cpu.shape() && back.dtype() == cpu.dtype() &&
         std::memcmp(back.raw_data(), cpu.raw_data(), cpu.bytes()) == 0;
}

data::ImageDataset random_images(int64_t count) {
  data::ImageDataset d;
  d.images = random_cpu({count, 1, 28, 28}, DType::f32, 91);
  for (int64_t i = 0; i < count; ++i) d.labels.push_back(i % 10);
  return d;
}

}  // namespace

TEST_CASE("AsyncUploader: the device tensors are the host bytes, while the compute stream is busy") {
  cuda::AsyncUploader uploader(Device::cuda(0));
  Tensor busy = on_gpu(random_cpu({1 << 22}, DType::f32, 1));
  for (int round = 0; round < 20; ++round) {
    INFO("round " << round);
    std::vector<Tensor> host = {random_cpu({64, 3, 17, 5}, DType::f32, 10 + round),
                                random_cpu({7}, DType::f64, 100 + round), Tensor::empty({0}, DType::f32)};
    for (int k = 0; k < 4; ++k) kernels::scale_(busy, 1.0001);  // queued ahead of the copy
    cuda::AsyncUploader::Upload up = uploader.start(host);
    // Freed blocks of the last round may be the destinations: written only after the
    // compute work above, read only after finish.
    uploader.finish(up);
    Tensor doubled = kernels::scale(up.tensors[0], 2.0);  // compute-stream work on the data
    REQUIRE(up.tensors.size() == host.size());
    for (size_t i = 0; i < host.size(); ++i) CHECK(same_bytes(up.tensors[i], host[i]));
    CHECK(same_bytes(doubled, kernels::scale(host[0], 2.0)));
  }
  CHECK_THROWS_WITH(uploader.start({on_gpu(random_cpu({3}, DType::f32, 2))}),
                    Catch::Contains("AsyncUploader: uploads CPU tensors"));
}

TEST_CASE("BatchPrefetcher: batches staged a step ahead are bitwise the synchronous upload") {
  const data::ImageDataset images = random_images(40);
  const models::BatchSpec cpu_spec{
      .seed = 4, .world_size = 2, .rank = 1, .batch = 8, .noise_dim = 100, .side = 64};
  models::BatchSpec gpu_spec = cpu_spec;
  gpu_spec.device = Device::cuda(0);
  const models::BatchMaker on_cpu(cpu_spec, images), synchronous(gpu_spec, images);
  models::BatchPrefetcher prefetcher(on_cpu, Device::cuda(0));
  // In order with the next staged, then a jump (the staged batch is not the one asked for).
  for (auto [it, next] : {std::pair<int64_t, int64_t>{0, 1}, {1, 2}, {2, 3}, {7, 8}, {8, -1}, {3, -1}}) {
    INFO("iteration " << it);
    models::LabeledBatch got = prefetcher.take(it, next);
    models::LabeledBatch want = synchronous.make(it);
    REQUIRE(got.inputs.device().is_cuda());
    CHECK(same_bytes(got.inputs, want.inputs.to(Device::cpu())));
    CHECK(same_bytes(got.targets, want.targets.to(Device::cpu())));
    CHECK(same_bytes(got.aux, want.aux.to(Device::cpu())));
    REQUIRE(got.labels.device().is_cuda());
    REQUIRE(want.labels.device().is_cuda());
    CHECK(same_bytes(got.labels, want.labels.to(Device::cpu())));
    CHECK(same_bytes(got.labels, on_cpu.make(it).labels));
    CHECK(got.inputs.shape() == Shape{8, 1, 64, 64});
  }
}

TEST_CASE("DistributedSampler: a batch on the device is the CPU batch, labels included") {
  const data::ImageDataset images = random_images(40);
  const data::DistributedSampler sampler(40, 3, 2, 4, 6, /*drop_last=*/false);
  for (int64_t i = 0; i < sampler.batches_per_epoch(); ++i) {
    INFO("batch " << i);
    const data::SampledBatch cpu = sampler.batch(images, 1, i);
    const data::SampledBatch gpu = sampler.batch(images, 1, i, Device::cuda(0));
    REQUIRE(gpu.labels.device().is_cuda());
    REQUIRE(gpu.images.device().is_cuda());
    CHECK(gpu.indices == cpu.indices);
    CHECK(same_bytes(gpu.images, cpu.images));
    CHECK(same_bytes(gpu.labels, cpu.labels));
  }
}
