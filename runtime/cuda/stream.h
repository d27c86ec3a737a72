// CUDA streams, events and pinned host buffers as RAII types. CUDA builds only.
//
// Contract:
// - compute_stream() is the stream every kernel of kernels/cuda runs on (the legacy
//   default stream; see cuda_memory.h for why that keeps the caching allocator safe).
// - CudaStream owns a non-blocking stream; CudaEvent owns an event (timing enabled when
//   asked) with record / wait-on-stream / synchronize / elapsed.
// - PinnedBuffer owns page-locked host memory (cudaHostAlloc), which makes host<->device
//   copies asynchronous and about twice as fast as from pageable memory.
// Every call is checked; errors name the call and file:line.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

namespace tandem::cuda {

inline cudaStream_t compute_stream() { return cudaStreamLegacy; }

// True when a CUDA device can be used here; else `why` says what failed.
bool device_available(std::string* why = nullptr);

class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }
  void record(cudaStream_t stream = compute_stream());
  void wait_on(cudaStream_t stream) const;  // `stream` waits for this event
  void synchronize() const;
  bool done() const;
  float milliseconds_since(const CudaEvent& start) const;  // both recorded with timing

 private:
  cudaEvent_t event_ = nullptr;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Grows (never shrinks) to at least `bytes`; the contents are not kept.
  void reserve(size_t bytes);

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tandem::cuda
