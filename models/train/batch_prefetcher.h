// The batches of a GPU run, uploaded one iteration ahead from pinned memory.
//
// Contract:
// - BatchPrefetcher(maker_on_cpu, device): maker_on_cpu makes the batches on the CPU (its
//   BatchSpec's device is the CPU). On a CUDA device, take(i) returns the batch of
//   iteration i on the device, and before returning stages iteration next_iteration (when
//   >= 0) in a pinned buffer and starts its copy on a copy stream (runtime/cuda/async_upload.h),
//   so that the upload overlaps step i's kernels. take(i) for a batch that was not staged
//   (the first, or after a jump) stages it then. The compute stream waits for the
//   batch's copy (an event) before take returns: the values are bitwise maker.make(i)'s,
//   labels included.
// - On the CPU take(i) is maker.make(i) (nothing staged); a CUDA device in a build without
//   CUDA is an Error naming the device.
#pragma once

#include <memory>
#include <optional>

#include "models/train/batch_maker.h"

namespace tandem::models {

class BatchPrefetcher {
 public:
  BatchPrefetcher(const BatchMaker& maker_on_cpu, Device device);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  LabeledBatch take(int64_t iteration, int64_t next_iteration = -1);

 private:
  struct Staged;
  const BatchMaker& maker_;
  Device device_;
  std::unique_ptr<Staged> staged_;  // CUDA builds: the uploader and the upload in flight
};

}  // namespace tandem::models
