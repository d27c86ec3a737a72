// Storage: one allocation on one device, shared by every tensor that views it.
//
// Contract: Storage owns its bytes and frees them through the allocator of its device
// when the last tensor viewing it goes away. An adopted storage (the second constructor)
// views memory tandem did not allocate (a shared-memory mapping): it frees nothing itself
// and holds `keeper`, whose destruction releases the memory, until it goes away. Allocators are registered
// per device kind; the CPU one (runtime/cpu_memory.h: 64-byte aligned, caching) is always present, the CUDA
// one is registered by CUDA builds.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace tandem {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, Device device) = 0;
  virtual void deallocate(void* ptr, size_t bytes, Device device) = 0;
};

// Replaces the allocator for one device kind; the previous one must outlive its storages.
void set_allocator(DeviceKind kind, Allocator* allocator);
Allocator* allocator_for(DeviceKind kind);

class Storage {
 public:
  Storage(size_t bytes, Device device);
  Storage(void* data, size_t bytes, Device device, std::shared_ptr<void> keeper);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;  // null for an adopted storage
  std::shared_ptr<void> keeper_;    // an adopted storage's owner of its memory
};

}  // namespace tandem
