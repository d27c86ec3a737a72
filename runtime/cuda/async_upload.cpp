#include "runtime/cuda/async_upload.h"

#include <cstring>

#include "runtime/cuda_check.h"
#include "runtime/error.h"

namespace tandem::cuda {

AsyncUploader::AsyncUploader(Device device, size_t slots) : device_(device) {
  TANDEM_CHECK(device.is_cuda(), "AsyncUploader: needs a CUDA device, got " << device.str());
  TANDEM_CHECK(slots >= 1, "AsyncUploader: needs at least one staging slot");
  slots_.resize(slots);
  for (Slot& s : slots_) s.copied = std::make_unique<CudaEvent>();
}

AsyncUploader::~AsyncUploader() {
  // The staging buffers must outlive the copies that read them.
  for (Slot& s : slots_) {
    if (s.in_flight) cudaEventSynchronize(s.copied->get());
  }
}

AsyncUploader::Upload AsyncUploader::start(const std::vector<Tensor>& host) {
  TANDEM_CHECK_CUDA(cudaSetDevice(device_.index));
  size_t bytes = 0;
  for (const Tensor& t : host) {
    TANDEM_CHECK(
        t.defined() && t.device().is_cpu(),
        "AsyncUploader: uploads CPU tensors, got " << (t.defined() ? t.str() : std::string("undefined")));
    bytes += t.bytes();
  }
  Upload upload;
  upload.slot = next_;
  next_ = (next_ + 1) % slots_.size();
  Slot& slot = slots_[upload.slot];
  if (slot.in_flight) slot.copied->synchronize();  // its previous copies still read the buffer
  slot.staging.reserve(bytes);
  compute_mark_.record(compute_stream());
  compute_mark_.wait_on(copy_stream_.get());
  auto* staging = static_cast<unsigned char*>(slot.staging.data());
  size_t at = 0;
  for (const Tensor& t : host) {
    Tensor out = Tensor::empty(t.shape(), t.dtype(), device_);
    if (t.bytes() > 0) {
      std::memcpy(staging + at, t.raw_data(), t.bytes());
      TANDEM_CHECK_CUDA(cudaMemcpyAsync(out.raw_data(), staging + at, t.bytes(), cudaMemcpyHostToDevice,
                                        copy_stream_.get()));
    }
    at += t.bytes();
    upload.tensors.push_back(std::move(out));
  }
  slot.copied->record(copy_stream_.get());
  slot.in_flight = true;
  return upload;
}

void AsyncUploader::finish(const Upload& upload) const {
  TANDEM_CHECK(upload.slot < slots_.size(),
               "AsyncUploader::finish: no such upload (slot " << upload.slot << ")");
  slots_[upload.slot].copied->wait_on(compute_stream());
}

}  // namespace tandem::cuda
