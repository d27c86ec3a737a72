#include "runtime/storage.h"

#include "runtime/cpu_memory.h"
#include "runtime/error.h"

namespace tandem {

namespace {

Allocator* g_allocators[2] = {nullptr, nullptr};  // null: the default of the kind

}  // namespace

void set_allocator(DeviceKind kind, Allocator* allocator) {
  g_allocators[static_cast<int>(kind)] = allocator;
}

Allocator* allocator_for(DeviceKind kind) {
  Allocator* set = g_allocators[static_cast<int>(kind)];
  if (set == nullptr && kind == DeviceKind::cpu) return &cpu_caching_allocator();
  return set;
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  allocator_ = allocator_for(device.kind);
  TANDEM_CHECK(allocator_ != nullptr, "no allocator for device "
                                          << device.str()
                                          << " (this build has no CUDA support, or CUDA is not initialised)");
  data_ = allocator_->allocate(bytes, device);
}

Storage::Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> keeper)
    : data_(data), bytes_(bytes), device_(device), keeper_(std::move(keeper)) {
  TANDEM_CHECK(data != nullptr || bytes == 0, "adopted storage of " << bytes << " bytes has no memory");
}

Storage::~Storage() {
  if (data_ != nullptr && allocator_ != nullptr) allocator_->deallocate(data_, bytes_, device_);
}

}  // namespace tandem
