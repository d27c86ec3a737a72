// CUDA memory for tensors: a caching allocator, its statistics, and the device operations
// Tensor needs (copy, fill, dtype conversion). CUDA builds only.
//
// Contract:
// - install_cuda_memory() registers the caching allocator for CUDA tensors and the device
//   operations of tensor.h. Idempotent. It does not touch the GPU, so it is safe to call
//   on a machine without one (allocations then fail with the CUDA error).
// - Stream model: every kernel and device-to-device copy runs on the compute stream, which
//   is CUDA's legacy default stream. A freed block returns to the cache at once and may be
//   handed out again: work queued on the compute stream is ordered after the work that
//   used it. Work on other streams (NCCL's) keeps its tensors alive until it completes.
// - A copy between host and device inside a CUDA graph capture (cuda_graph.h) is an Error
//   naming the capture: the captured work has not run, and replays would not repeat it.
// - The cache rounds requests up (512 B below 1 MiB, then to whole MiB), reuses the
//   smallest cached block that fits with at most 25% (small) or 1 MiB (large) slack, and
//   calls cudaMalloc only on a miss. When cudaMalloc runs out of memory the cache is
//   emptied and the call retried once; a second failure names the request, the device
//   and the statistics.
// - set_cuda_memory_poison(true) fills every block handed out with 0xFF bytes (NaN in
//   every float type), so a kernel that leaves an output element unwritten is caught
//   (not blocks of a private pool: the fill would be captured and replayed).
// - Private pools, for CUDA graphs (cuda_graph.h): between begin_private_cuda_pool() and
//   end_private_cuda_pool() the calling thread's allocations come from a new pool, and
//   every block it frees meanwhile joins that pool, whichever pool it came from (the
//   graph being captured may use it; replays write it again). A private pool's blocks are
//   handed out only to the thread that has it open, so a graph's memory stays valid for
//   its replays. release_private_cuda_pool(id), once the graph is destroyed, returns the
//   pool's cached blocks to the shared cache; its blocks still in use go there when freed.
//   cudaMalloc for a private pool runs in relaxed capture mode: it is not a stream
//   operation, so the graph does not repeat it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {

void install_cuda_memory();

struct CudaMemoryStats {
  size_t bytes_in_use = 0;  // handed out to tensors now (rounded sizes)
  size_t peak_bytes_in_use = 0;
  size_t bytes_reserved = 0;  // obtained from cudaMalloc and not yet returned
  size_t peak_bytes_reserved = 0;
  uint64_t allocations = 0;     // blocks handed out
  uint64_t cache_hits = 0;      // ... of which came from the cache
  uint64_t device_mallocs = 0;  // cudaMalloc calls
  uint64_t device_frees = 0;    // cudaFree calls (empty_cuda_cache, out-of-memory retry)
};

CudaMemoryStats cuda_memory_stats();
void reset_cuda_peak_stats();
// Returns every cached (unused) block to the driver.
void empty_cuda_cache();
void set_cuda_memory_poison(bool on);
int begin_private_cuda_pool();  // returns the pool's id
void end_private_cuda_pool();
void release_private_cuda_pool(int id);

}  // namespace tandem
