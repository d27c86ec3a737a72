#include "runtime/cuda/cuda_memory.h"

#include <map>
#include <mutex>
#include <set>
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

thread_local int t_private_pool = 0;  // 0: the shared pool
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
    const int pool_id = t_private_pool;
    Pool& pool = pools_[{device.index, pool_id}];
    ++stats_.allocations;
    Block block = take_cached(pool, size);
    if (block.ptr != nullptr) {
      ++stats_.cache_hits;
    } else {
      block = device_malloc(pool, size, device, pool_id != 0);
    }
    void* ptr = block.ptr;
    pool.in_use.emplace(ptr, block.size);  // a cached block keeps its own size and bin
    pool_of_[ptr] = pool_id;
    stats_.bytes_in_use += block.size;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    if (poison_ && pool_id == 0) {  // in a capture the fill would replay over what is uploaded before launch
      TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
      TANDEM_CHECK_CUDA(cudaMemsetAsync(ptr, 0xFF, size, cuda::compute_stream()));
    }
    return ptr;
  }

  // Never throws: it runs from Storage's destructor.
  void deallocate(void* ptr, size_t, Device device) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto owner = pool_of_.find(ptr);
    if (owner == pool_of_.end()) return;
    Pool& from = pools_[{device.index, owner->second}];
    auto it = from.in_use.find(ptr);
    if (it == from.in_use.end()) return;
    // Freed while this thread captures: the graph may use the block, so its pool keeps it.
    // A released pool's blocks go back to the shared cache.
    int to_id = t_private_pool != 0 ? t_private_pool : owner->second;
    if (released_.count(to_id) != 0) to_id = 0;
    const size_t size = it->second;
    stats_.bytes_in_use -= size;
    from.in_use.erase(it);
    pool_of_.erase(owner);
    pools_[{device.index, to_id}].cached.emplace(size, ptr);
  }

  int begin_private_pool() {
    std::lock_guard<std::mutex> lock(mu_);
    TANDEM_CHECK(t_private_pool == 0, "a private CUDA memory pool is already in use on this thread");
    t_private_pool = next_private_pool_++;
    return t_private_pool;
  }
  void end_private_pool() { t_private_pool = 0; }
  void release_private_pool(int id) {
    std::lock_guard<std::mutex> lock(mu_);
    released_.insert(id);
    for (auto& [key, pool] : pools_) {
      if (key.second != id) continue;
      Pool& shared = pools_[{key.first, 0}];
      shared.cached.insert(pool.cached.begin(), pool.cached.end());
      pool.cached.clear();
    }
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
    for (auto& [key, pool] : pools_) {
      if (key.second == 0) release_cached(pool, key.first);  // private pools belong to their graphs
    }
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

  Block device_malloc(Pool& pool, size_t size, Device device, bool capturing) {
    TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
    void* ptr = nullptr;
    // During a capture cudaMalloc is allowed in relaxed mode only; it is not a stream
    // operation, so the graph does not repeat it: the block stays the graph's.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (capturing) TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t rc = cudaMalloc(&ptr, size);
    if (capturing) TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    if (rc == cudaErrorMemoryAllocation && !capturing) {  // emptying the cache synchronises the device
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
    host_cost::note_device_malloc();
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
      host_cost::note_device_free();
    }
    pool.cached.clear();
  }

  std::mutex mu_;
  std::map<std::pair<int, int>, Pool> pools_;  // by (device, pool): pool 0 is shared, others private
  std::unordered_map<void*, int> pool_of_;     // the pool of each block in use
  std::set<int> released_;                     // private pools whose graphs are gone
  int next_private_pool_ = 1;
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
  // The legacy stream is not the capturing one: the copy would run now and read a value the
  // captured work has not written yet.
  TANDEM_CHECK(!cuda::compute_stream_capturing(),
               "a copy between host and "
                   << (dst_device.is_cuda() ? dst_device : src_device).str() << " of " << bytes
                   << " bytes inside a CUDA graph capture: the captured work has not "
                      "run, and a replay would not repeat the copy (read device values "
                      "such as .item() after launching the graph)");
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
int begin_private_cuda_pool() { return caching_allocator().begin_private_pool(); }
void end_private_cuda_pool() { caching_allocator().end_private_pool(); }
void release_private_cuda_pool(int id) { caching_allocator().release_private_pool(id); }

}  // namespace tandem
