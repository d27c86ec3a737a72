#include "runtime/storage.h"

#include <cstdlib>
#include <new>

#include "runtime/error.h"

namespace tandem {

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device) override {
    constexpr size_t kAlign = 64;  // a cache line; also what AVX-512 loads like
    size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* ptr = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    TANDEM_CHECK(ptr != nullptr, "out of host memory allocating " << bytes << " bytes");
    return ptr;
  }
  void deallocate(void* ptr, size_t, Device) override { std::free(ptr); }
};

CpuAllocator g_cpu_allocator;
Allocator* g_allocators[2] = {&g_cpu_allocator, nullptr};

}  // namespace

void set_allocator(DeviceKind kind, Allocator* allocator) {
  g_allocators[static_cast<int>(kind)] = allocator;
}

Allocator* allocator_for(DeviceKind kind) { return g_allocators[static_cast<int>(kind)]; }

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  allocator_ = allocator_for(device.kind);
  TANDEM_CHECK(allocator_ != nullptr,
               "no allocator for device " << device.str()
                                          << " (this build has no CUDA support, or CUDA is not initialised)");
  data_ = allocator_->allocate(bytes, device);
}

Storage::~Storage() {
  if (data_ != nullptr) allocator_->deallocate(data_, bytes_, device_);
}

}  // namespace tandem
