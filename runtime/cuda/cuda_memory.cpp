#include "runtime/cuda/cuda_memory.h"

#include "runtime/cuda_check.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"

namespace tandem {

namespace {

class PlainCudaAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device device) override {
    TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
    void* ptr = nullptr;
    TANDEM_CHECK_CUDA(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes));
    return ptr;
  }
  // Never throws: it runs from Storage's destructor.
  void deallocate(void* ptr, size_t, Device device) override {
    cudaSetDevice(device.index);
    cudaFree(ptr);
  }
};

void copy_with_cuda(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  TANDEM_CHECK_CUDA(cudaSetDevice(dst_device.is_cuda() ? dst_device.index : src_device.index));
  TANDEM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

}  // namespace

void install_cuda_memory() {
  static PlainCudaAllocator allocator;
  if (allocator_for(DeviceKind::cuda) == nullptr) set_allocator(DeviceKind::cuda, &allocator);
  if (!has_device_copy()) set_device_copy(&copy_with_cuda);
}

}  // namespace tandem
