#include "runtime/cpu_memory.h"

#include <malloc.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/env_number.h"
#include "runtime/error.h"
#include "runtime/storage.h"

namespace tandem {

namespace {

constexpr size_t kAlign = 64;            // a cache line; also what AVX-512 loads like
constexpr size_t kLargeRound = 4 << 10;  // a page
constexpr size_t kDefaultCapacity = size_t{1} << 30;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

thread_local bool t_bypass = false;  // a CpuCacheBypass is alive on this thread

size_t round_request(size_t bytes) {
  size_t unit = bytes < kCpuCacheMinBytes ? kAlign : kLargeRound;
  return std::max(unit, (bytes + unit - 1) / unit * unit);
}

size_t capacity_from_env() {
  if (kSanitized) return 0;
  // Up to 1 TiB: MB -> bytes stays exact in size_t.
  std::optional<double> mb = env_number("TANDEM_CPU_CACHE_MB", 0, 1 << 20, "MB (0: no caching)");
  if (!mb) return kDefaultCapacity;
  return static_cast<size_t>(*mb * (1 << 20));
}

// glibc maps every block above its mmap threshold afresh and unmaps it on free, and it
// only raises that threshold after such a block is freed, which a cache never does. Then
// MPI's own temporary buffers (as large as a bucket, per allreduce) come fresh from the
// kernel every call: a 25 MB allreduce took 10x longer at 2 ranks. Serve blocks up to
// glibc's largest threshold from the heap, and keep freed heap memory up to the cache's
// capacity instead of trimming it.
void keep_malloc_pages(size_t keep_bytes) {
  constexpr int kLargestMmapThreshold = 32 << 20;  // glibc's maximum on 64-bit
  mallopt(M_MMAP_THRESHOLD, kLargestMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<size_t>(keep_bytes, INT_MAX)));
}

class CpuCachingAllocator final : public Allocator {
 public:
  CpuCachingAllocator() {
    stats_.capacity = capacity_from_env();
    if (stats_.capacity > 0) keep_malloc_pages(stats_.capacity);
  }

  void* allocate(size_t bytes, Device) override {
    const size_t size = round_request(bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.allocations;
      stats_.bytes_in_use += size;
      stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      auto it = cached_.find(size);
      if (it != cached_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= size;
        ++stats_.cache_hits;
        return ptr;
      }
    }
    void* ptr = std::aligned_alloc(kAlign, size);
    if (ptr == nullptr) {
      empty_cache();  // what the cache holds may be enough for this request
      ptr = std::aligned_alloc(kAlign, size);
    }
    if (ptr == nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_in_use -= size;
      TANDEM_FAIL("out of host memory allocating " << bytes << " bytes (tensors hold " << stats_.bytes_in_use
                                                   << " bytes)");
    }
    return ptr;
  }

  // Never throws: it runs from Storage's destructor.
  void deallocate(void* ptr, size_t bytes, Device) override {
    const size_t size = round_request(bytes);
    std::vector<void*> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_in_use -= size;
      if (!t_bypass && size >= kCpuCacheMinBytes && size <= stats_.capacity) {
        if (stats_.bytes_cached + size > stats_.capacity) take_all(release);
        cached_[size].push_back(ptr);
        stats_.bytes_cached += size;
        ptr = nullptr;
      }
    }
    std::free(ptr);
    for (void* p : release) std::free(p);
  }

  void empty_cache() {
    std::vector<void*> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      take_all(release);
    }
    for (void* p : release) std::free(p);
  }

  void set_capacity(size_t bytes) {
    std::vector<void*> release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.capacity = bytes;
      if (stats_.bytes_cached > bytes) take_all(release);
    }
    for (void* p : release) std::free(p);
  }

  CpuMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  // With mu_ held: moves every cached block to `out` for freeing outside the lock.
  void take_all(std::vector<void*>& out) {
    for (auto& [size, blocks] : cached_) out.insert(out.end(), blocks.begin(), blocks.end());
    cached_.clear();
    stats_.bytes_cached = 0;
  }

  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> cached_;  // by rounded size
  CpuMemoryStats stats_;
};

CpuCachingAllocator& instance() {
  static CpuCachingAllocator* allocator = new CpuCachingAllocator;  // outlives every static tensor
  return *allocator;
}

}  // namespace

Allocator& cpu_caching_allocator() { return instance(); }
CpuMemoryStats cpu_memory_stats() { return instance().stats(); }
void empty_cpu_cache() { instance().empty_cache(); }
void set_cpu_cache_capacity(size_t bytes) { instance().set_capacity(bytes); }

CpuCacheBypass::CpuCacheBypass() : previous_(t_bypass) { t_bypass = true; }
CpuCacheBypass::~CpuCacheBypass() { t_bypass = previous_; }

}  // namespace tandem
