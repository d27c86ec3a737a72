// Host-to-GPU uploads that overlap the compute stream's work. CUDA builds only.
//
// Contract:
// - AsyncUploader(device, slots) owns a copy stream and `slots` pinned staging buffers
//   (2: one upload can be staged while the previous one is being consumed).
// - start(host) copies CPU tensors into new tensors on the device: their bytes go into a
//   free slot's pinned buffer (the host waits only when that slot's previous copy has not
//   finished), then cudaMemcpyAsync on the copy stream. The copy waits for the work queued
//   on the compute stream when start() was called (the destination blocks come from the
//   caching allocator, whose reuse is ordered on the compute stream), not for work queued
//   later: it overlaps the step that is queued next.
// - finish(upload) makes the compute stream wait for that upload's copies (an event): work
//   queued there afterwards sees the data. Call it before using the tensors; until then
//   they must not be read.
// - The result is bitwise the source (a byte copy); dtypes and shapes are kept.
#pragma once

#include <memory>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

namespace tandem::cuda {

class AsyncUploader {
 public:
  struct Upload {
    std::vector<Tensor> tensors;  // on the device; not to be read before finish()
    size_t slot = 0;
  };

  explicit AsyncUploader(Device device, size_t slots = 2);
  ~AsyncUploader();
  AsyncUploader(const AsyncUploader&) = delete;
  AsyncUploader& operator=(const AsyncUploader&) = delete;

  Upload start(const std::vector<Tensor>& host);
  void finish(const Upload& upload) const;

 private:
  struct Slot {
    PinnedBuffer staging;
    std::unique_ptr<CudaEvent> copied;  // recorded on the copy stream after the slot's copies
    bool in_flight = false;
  };
  Device device_;
  CudaStream copy_stream_;
  CudaEvent compute_mark_;  // the compute stream's work at start(): the copy waits for it
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

}  // namespace tandem::cuda
