// Host memory for tensors: a caching allocator.
//
// Why: a training step frees and reallocates the same activation and gradient sizes every
// iteration. Through malloc, blocks of 128 kB and more come from fresh mappings, so each
// step pays page faults and the kernel's zeroing again (about a quarter of an mlp-GAN step
// on a 2-core VM). The cache hands the same blocks back instead.
//
// Contract:
// - Blocks are 64-byte aligned. Requests of kCpuCacheMinBytes and more are rounded up to
//   4 kB and cached by that exact size when freed; smaller ones go straight to malloc.
// - The cache holds at most its capacity (default 1 GiB; TANDEM_CPU_CACHE_MB overrides,
//   0 turns caching off). A freed block that does not fit empties the cache first, so
//   blocks of sizes a program stopped using (an earlier stage of a growing model) do not
//   stay forever.
// - While caching is on, glibc's malloc serves blocks up to 32 MiB from its heap and keeps
//   up to the capacity of freed heap memory (mallopt), so the temporary buffers of other
//   libraries (MPI's, as large as a bucket, every allreduce) stop costing page faults too.
// - A block handed out again keeps its old contents (like malloc).
// - While a CpuCacheBypass lives on a thread, blocks freed on that thread go back to malloc
//   instead of the cache: for memory whose size will likely not be asked for again (the
//   Reducer's evicted buckets), which malloc can then reuse for requests of any size,
//   where the cache would keep it for its own size only.
// - Builds with AddressSanitizer cache nothing, so every use after free is still caught.
// - Thread safe: tensors may be freed on the communication thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

class Allocator;

constexpr size_t kCpuCacheMinBytes = size_t{64} << 10;

// The allocator Storage uses for CPU tensors unless set_allocator replaced it.
Allocator& cpu_caching_allocator();

struct CpuMemoryStats {
  size_t bytes_in_use = 0;  // handed out to tensors now (rounded sizes)
  size_t peak_bytes_in_use = 0;
  size_t bytes_cached = 0;   // freed by tensors, kept for reuse
  size_t capacity = 0;       // the most bytes_cached may reach
  uint64_t allocations = 0;  // blocks handed out
  uint64_t cache_hits = 0;   // ... of which came from the cache
};

CpuMemoryStats cpu_memory_stats();
// Returns every cached block to the system.
void empty_cpu_cache();
// Sets the capacity (and empties the cache when it shrinks below what is held).
void set_cpu_cache_capacity(size_t bytes);

class CpuCacheBypass {
 public:
  CpuCacheBypass();
  ~CpuCacheBypass();
  CpuCacheBypass(const CpuCacheBypass&) = delete;
  CpuCacheBypass& operator=(const CpuCacheBypass&) = delete;

 private:
  bool previous_;
};

}  // namespace tandem
