#include "runtime/cuda/cuda_memory.h"

#include <map>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "runtime/cuda/device_ops.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#include "runtime/storage.h"
#include "runtime/tensor.h"

namespace tandem {

namespace {

constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{1} << 20;

size_t round_request(size_t bytes) {
  if (bytes == 0) bytes = 1;
  size_t unit = bytes < kLargeRound ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

std::string describe_bytes(size_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return os.str();
}

// One pool per device: cached blocks by size (best fit), and the sizes of blocks in use.
class CachingAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, Device device) override {
    const size_t size = round_request(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    Pool& pool = pools_[device.index];
    ++stats_.allocations;
    Block block = take_cached(pool, size);
    if (block.ptr != nullptr) {
      ++stats_.cache_hits;
    } else {
      block = device_malloc(pool, size, device);
    }
    void* ptr = block.ptr;
    pool.in_use.emplace(ptr, block.size);  // a cached block keeps its own size and bin
    stats_.bytes_in_use += block.size;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    if (poison_) {
      TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
      TANDEM_CHECK_CUDA(cudaMemsetAsync(ptr, 0xFF, size, cuda::compute_stream()));
    }
    return ptr;
  }

  // Never throws: it runs from Storage's destructor.
  void deallocate(void* ptr, size_t, Device device) override {
    std::lock_guard<std::mutex> lock(mu_);
    Pool& pool = pools_[device.index];
    auto it = pool.in_use.find(ptr);
    if (it == pool.in_use.end()) return;
    stats_.bytes_in_use -= it->second;
    pool.cached.emplace(it->second, ptr);
    pool.in_use.erase(it);
  }

  CudaMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
    stats_.peak_bytes_reserved = stats_.bytes_reserved;
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [index, pool] : pools_) release_cached(pool, index);
  }
  void set_poison(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    poison_ = on;
  }

 private:
  struct Pool {
    std::multimap<size_t, void*> cached;
    std::unordered_map<void*, size_t> in_use;
  };

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
  };

  Block take_cached(Pool& pool, size_t size) {
    auto it = pool.cached.lower_bound(size);
    if (it == pool.cached.end()) return {};
    size_t slack = size < kLargeRound ? size / 4 : kLargeRound;
    if (it->first - size > slack) return {};
    Block block{it->second, it->first};
    pool.cached.erase(it);
    return block;
  }

  Block device_malloc(Pool& pool, size_t size, Device device) {
    TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
    void* ptr = nullptr;
    cudaError_t rc = cudaMalloc(&ptr, size);
    if (rc == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached(pool, device.index);
      rc = cudaMalloc(&ptr, size);
    }
    if (rc != cudaSuccess) {
      cudaGetLastError();
      TANDEM_FAIL("out of memory on " << device.str() << ": cudaMalloc of " << describe_bytes(size)
                                      << " failed (" << cudaGetErrorString(rc) << "); tensors hold "
                                      << describe_bytes(stats_.bytes_in_use) << ", the cache holds "
                                      << describe_bytes(stats_.bytes_reserved - stats_.bytes_in_use)
                                      << " (peak in use " << describe_bytes(stats_.peak_bytes_in_use) << ")");
    }
    ++stats_.device_mallocs;
    stats_.bytes_reserved += size;
    stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
    return {ptr, size};
  }

  void release_cached(Pool& pool, int device) {
    if (pool.cached.empty()) return;
    cudaSetDevice(device);
    cudaDeviceSynchronize();  // cached blocks may still be read by queued work
    for (auto& [size, ptr] : pool.cached) {
      cudaFree(ptr);
      stats_.bytes_reserved -= size;
      ++stats_.device_frees;
    }
    pool.cached.clear();
  }

  std::mutex mu_;
  std::unordered_map<int, Pool> pools_;
  CudaMemoryStats stats_;
  bool poison_ = false;
};

CachingAllocator& caching_allocator() {
  static CachingAllocator* allocator = new CachingAllocator;  // outlives every static tensor
  return *allocator;
}

void copy_with_cuda(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  TANDEM_CHECK_CUDA(cudaSetDevice(dst_device.is_cuda() ? dst_device.index : src_device.index));
  if (dst_device.is_cuda() && src_device.is_cuda()) {
    TANDEM_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda::compute_stream()));
    return;
  }
  // Touches the host: cudaMemcpy on the legacy stream returns when the host side is done.
  TANDEM_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

}  // namespace

void install_cuda_memory() {
  if (allocator_for(DeviceKind::cuda) == nullptr) set_allocator(DeviceKind::cuda, &caching_allocator());
  if (!has_device_ops()) {
    DeviceOps ops;
    ops.copy = &copy_with_cuda;
    ops.fill = &cuda::device_fill;
    ops.convert = &cuda::device_convert;
    set_device_ops(ops);
  }
}

CudaMemoryStats cuda_memory_stats() { return caching_allocator().stats(); }
void reset_cuda_peak_stats() { caching_allocator().reset_peaks(); }
void empty_cuda_cache() { caching_allocator().empty_cache(); }
void set_cuda_memory_poison(bool on) { caching_allocator().set_poison(on); }

}  // namespace tandem
