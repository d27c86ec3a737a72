// Distributed sampling: which dataset rows each rank trains on, batch by batch.
//
// Contract:
// - Each epoch e has one permutation of [0, dataset_size), a Fisher-Yates shuffle driven by
//   a Generator keyed by (seed, e): identical on every rank, different between epochs.
// - Global step i of an epoch covers permutation positions [i*W*B, (i+1)*W*B) (W ranks,
//   B rows per rank); rank r takes positions [(i*W + r)*B, (i*W + r + 1)*B). So the shards
//   of one epoch are disjoint, and W ranks at batch B see exactly the rows one process
//   would see at batch W*B (the data-parallel oracle).
// - Every rank gets batches_per_epoch() full batches of B rows. drop_last=true: the
//   floor(N / (W*B)) full global steps, the tail of the permutation is skipped (it needs
//   N >= W*B). drop_last=false: ceil(N / (W*B)) steps, the last one padded by wrapping
//   around to the start of the permutation (some rows repeat), as PyTorch's sampler does.
// - Bad arguments throw an Error saying what is wrong, e.g. "batch 64 per rank needs at
//   least 128 samples for 2 ranks; the dataset has 100, a shard of 50 per rank".
// - batch(dataset, epoch, i, device) is batch i's rows of a dataset of dataset_size()
//   images: its indices, the images stacked [B, ...] and their labels as int64 [B], row k of
//   each being dataset row indices[k]; images and labels on `device`. A dataset of another
//   size, or whose labels are not one per image, is an Error.
// - Not thread-safe: the current epoch's permutation is cached inside.
#pragma once

#include <cstdint>
#include <vector>

#include "models/data/dataset.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace tandem::data {

struct SampledBatch {
  std::vector<int64_t> indices;  // the dataset rows, in batch order
  Tensor images;                 // [B, ...]: those rows of the dataset's images
  Tensor labels;                 // int64 [B]: their labels
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, int world_size, int rank, int64_t batch_size, uint64_t seed,
                     bool drop_last = true);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  int64_t dataset_size() const { return dataset_size_; }
  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int64_t batch_size() const { return batch_size_; }
  bool drop_last() const { return drop_last_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  // The epoch's permutation of [0, dataset_size) (a copy).
  std::vector<int64_t> permutation(int64_t epoch) const { return cached_permutation(epoch); }
  // This rank's batch i (0 <= i < batches_per_epoch()) of `epoch`: batch_size() indices.
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t i) const;
  std::vector<int64_t> batch_indices(int64_t i) const { return batch_indices(epoch_, i); }
  // This rank's batch i of `epoch`, gathered from `dataset`: indices, images and labels.
  SampledBatch batch(const ImageDataset& dataset, int64_t epoch, int64_t i,
                     Device device = Device::cpu()) const;

 private:
  const std::vector<int64_t>& cached_permutation(int64_t epoch) const;

  int64_t dataset_size_;
  int world_size_;
  int rank_;
  int64_t batch_size_;
  uint64_t seed_;
  bool drop_last_;
  int64_t batches_per_epoch_ = 0;
  int64_t epoch_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
};

// Rows `indices` of `data` (any dtype, CPU), stacked along a new first axis:
// [indices.size(), data.shape()[1:]...]. An index outside [0, data.size(0)) throws.
Tensor gather_rows(const Tensor& data, const std::vector<int64_t>& indices);

}  // namespace tandem::data
