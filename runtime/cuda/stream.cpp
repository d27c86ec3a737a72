#include "runtime/cuda/stream.h"

#include <utility>

#include "runtime/cuda_check.h"

namespace tandem::cuda {

bool device_available(std::string* why) {
  int count = 0;
  cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = rc != cudaSuccess ? std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(rc) +
                                     " (error " + std::to_string(static_cast<int>(rc)) + ")"
                               : std::string("no CUDA device found");
    }
    cudaGetLastError();
    return false;
  }
  return true;
}

bool compute_stream_capturing() {
  if (detail::t_compute_stream == nullptr) return false;  // the legacy stream is never captured
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TANDEM_CHECK_CUDA(cudaStreamIsCapturing(detail::t_compute_stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

CudaStream::CudaStream() { TANDEM_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
CudaStream::~CudaStream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}
void CudaStream::synchronize(std::source_location where) const {
  const int64_t t0 = host_cost::now_ns_if_counting();
  TANDEM_CHECK_CUDA(cudaStreamSynchronize(stream_));
  host_cost::note_sync(where, host_cost::now_ns_if_counting() - t0);
}

CudaEvent::CudaEvent(bool timing) {
  TANDEM_CHECK_CUDA(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}
CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}
void CudaEvent::record(cudaStream_t stream) { TANDEM_CHECK_CUDA(cudaEventRecord(event_, stream)); }
void CudaEvent::wait_on(cudaStream_t stream) const {
  TANDEM_CHECK_CUDA(cudaStreamWaitEvent(stream, event_, 0));
}
void CudaEvent::synchronize(std::source_location where) const {
  const int64_t t0 = host_cost::now_ns_if_counting();
  TANDEM_CHECK_CUDA(cudaEventSynchronize(event_));
  host_cost::note_sync(where, host_cost::now_ns_if_counting() - t0);
}
bool CudaEvent::done() const {
  cudaError_t rc = cudaEventQuery(event_);
  if (rc == cudaErrorNotReady) return false;
  TANDEM_CHECK_CUDA(rc);
  return true;
}
float CudaEvent::milliseconds_since(const CudaEvent& start) const {
  float ms = 0.0f;
  TANDEM_CHECK_CUDA(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

PinnedBuffer::PinnedBuffer(size_t bytes) { reserve(bytes); }
PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}
void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  if (data_ != nullptr) TANDEM_CHECK_CUDA(cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
  TANDEM_CHECK_CUDA(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
  bytes_ = bytes;
}

}  // namespace tandem::cuda
