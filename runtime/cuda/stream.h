// CUDA streams, events and pinned host buffers as RAII types. CUDA builds only.
//
// Contract:
// - compute_stream() is the stream every kernel of kernels/cuda runs on: the legacy
//   default stream (see cuda_memory.h for why that keeps the caching allocator safe),
//   except on a thread inside a ComputeStreamScope, where it is the scope's stream. A
//   CUDA graph's capture (cuda_graph.h) uses one: capture cannot run on the legacy stream.
// - CudaStream owns a non-blocking stream; CudaEvent owns an event (timing enabled when
//   asked) with record / wait-on-stream / synchronize / elapsed.
// - PinnedBuffer owns page-locked host memory (cudaHostAlloc), which makes host<->device
//   copies asynchronous and about twice as fast as from pageable memory.
// Every call is checked; errors name the call and file:line.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <source_location>
#include <string>

namespace tandem::cuda {

namespace detail {
inline thread_local cudaStream_t t_compute_stream = nullptr;  // nullptr: the legacy default stream
}  // namespace detail

inline cudaStream_t compute_stream() {
  return detail::t_compute_stream != nullptr ? detail::t_compute_stream : cudaStreamLegacy;
}

// Makes `stream` this thread's compute stream for the scope's lifetime.
class ComputeStreamScope {
 public:
  explicit ComputeStreamScope(cudaStream_t stream) : previous_(detail::t_compute_stream) {
    detail::t_compute_stream = stream;
  }
  ~ComputeStreamScope() { detail::t_compute_stream = previous_; }
  ComputeStreamScope(const ComputeStreamScope&) = delete;
  ComputeStreamScope& operator=(const ComputeStreamScope&) = delete;

 private:
  cudaStream_t previous_;
};

// True while work queued on compute_stream() is being captured into a graph.
bool compute_stream_capturing();

// True when a CUDA device can be used here; else `why` says what failed.
bool device_available(std::string* why = nullptr);

class CudaStream {
 public:
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  // A host wait: noted with the caller's site (runtime/host_cost.h).
  void synchronize(std::source_location where = std::source_location::current()) const;

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
  // A host wait: noted with the caller's site (runtime/host_cost.h).
  void synchronize(std::source_location where = std::source_location::current()) const;
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
