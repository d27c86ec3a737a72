#include "models/data/sampler.h"

#include <cstring>
#include <numeric>
#include <utility>

#include "runtime/error.h"
#include "runtime/rng.h"

namespace tandem::data {

namespace {

// SplitMix64 finaliser: nearby (seed, epoch) pairs get unrelated Philox keys.
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank, int64_t batch_size,
                                       uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      batch_size_(batch_size),
      seed_(seed),
      drop_last_(drop_last) {
  TANDEM_CHECK(batch_size > 0,
               "DistributedSampler: batch size per rank must be positive, got " << batch_size);
  TANDEM_CHECK(world_size > 0, "DistributedSampler: world size must be positive, got " << world_size);
  TANDEM_CHECK(rank >= 0 && rank < world_size,
               "DistributedSampler: rank " << rank << " is outside [0, " << world_size << ")");
  TANDEM_CHECK(dataset_size > 0, "DistributedSampler: the dataset is empty (size " << dataset_size << ")");
  const int64_t step = batch_size * world_size;
  if (drop_last) {
    TANDEM_CHECK(dataset_size >= step, "DistributedSampler: batch "
                                           << batch_size << " per rank needs at least " << step
                                           << " samples for " << world_size << " ranks; the dataset has "
                                           << dataset_size << ", a shard of " << dataset_size / world_size
                                           << " per rank");
    batches_per_epoch_ = dataset_size / step;
  } else {
    batches_per_epoch_ = (dataset_size + step - 1) / step;
  }
}

const std::vector<int64_t>& DistributedSampler::cached_permutation(int64_t epoch) const {
  TANDEM_CHECK(epoch >= 0, "DistributedSampler: epoch must be non-negative, got " << epoch);
  if (epoch != cached_epoch_) {
    cached_permutation_.resize(static_cast<size_t>(dataset_size_));
    std::iota(cached_permutation_.begin(), cached_permutation_.end(), int64_t{0});
    Generator gen(mix64(seed_ ^ mix64(static_cast<uint64_t>(epoch))));
    for (int64_t i = dataset_size_ - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(gen.below(static_cast<uint64_t>(i + 1)));
      std::swap(cached_permutation_[static_cast<size_t>(i)], cached_permutation_[static_cast<size_t>(j)]);
    }
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> DistributedSampler::batch_indices(int64_t epoch, int64_t i) const {
  TANDEM_CHECK(i >= 0 && i < batches_per_epoch_, "DistributedSampler: batch " << i << " is outside [0, "
                                                                              << batches_per_epoch_
                                                                              << ") for this epoch");
  const std::vector<int64_t>& perm = cached_permutation(epoch);
  std::vector<int64_t> out(static_cast<size_t>(batch_size_));
  const int64_t start = (i * world_size_ + rank_) * batch_size_;
  for (int64_t k = 0; k < batch_size_; ++k) {
    out[static_cast<size_t>(k)] = perm[static_cast<size_t>((start + k) % dataset_size_)];
  }
  return out;
}

SampledBatch DistributedSampler::batch(const ImageDataset& dataset, int64_t epoch, int64_t i,
                                       Device device) const {
  TANDEM_CHECK(dataset.size() == dataset_size_, "DistributedSampler: built for "
                                                    << dataset_size_ << " samples, given a dataset of "
                                                    << dataset.size());
  SampledBatch out;
  out.indices = batch_indices(epoch, i);
  out.images = gather_rows(dataset.images, out.indices);
  out.labels = dataset.label_tensor(out.indices);
  if (!device.is_cpu()) {
    out.images = out.images.to(device);
    out.labels = out.labels.to(device);
  }
  return out;
}

Tensor gather_rows(const Tensor& data, const std::vector<int64_t>& indices) {
  check_defined("gather_rows", data, "data");
  TANDEM_CHECK(data.dim() >= 1, "gather_rows: data must have at least one axis, got " << data.str());
  TANDEM_CHECK(data.device().is_cpu(), "gather_rows: data must be on the CPU, got " << data.str());
  Shape shape = data.shape();
  const int64_t rows = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, data.dtype());
  const size_t row_bytes = rows > 0 ? data.bytes() / static_cast<size_t>(rows) : 0;
  const auto* src = static_cast<const unsigned char*>(data.raw_data());
  auto* dst = static_cast<unsigned char*>(out.raw_data());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t r = indices[k];
    TANDEM_CHECK(r >= 0 && r < rows, "gather_rows: index " << r << " (position " << k << ") is outside [0, "
                                                           << rows << ") for " << data.str());
    std::memcpy(dst + k * row_bytes, src + static_cast<size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace tandem::data
