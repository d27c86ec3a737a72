// Private to optim.cu and bucket_ops.cu: the multi-tensor launch, one kernel launch per call
// for a whole group of tensors, with an op functor doing the work per element.
//
// A call's tensors are laid end to end in one index space; each tensor starts at a
// multiple of kAlign there, so the part of a tensor that a chunk covers starts on a
// 16-byte boundary whenever the tensor's pointers do, and the body can use 16-byte
// loads. Blocks take chunks of the space, grid-stride, and find their first tensor
// by binary search over the per-tensor descriptors (Slot), which live in a device array
// (see Staging: repeated calls find theirs already there).
//
// A named namespace, not an unnamed one: the descriptor cache of staging() is one per
// process, shared by the optimizers and the bucket copies. The ops live in the .cu files,
// in unnamed namespaces, so each kernel instantiation stays in its own translation unit.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#include "runtime/step_capture.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda::multi_tensor_detail {

constexpr int kThreads = 512;
constexpr int64_t kAlign = 4;        // elements: 16 bytes of float32
constexpr int kSharedStarts = 4096;  // slot starts a block keeps in shared memory
constexpr int kMaxPointers = 4;
// A step issues some 30 multi-tensor launches whose descriptors are new (temporaries'
// pointers): a ring of 4 staging buffers made the host wait, several times a step, for a
// copy queued behind the step's kernels (kernel_floor_bench's host costs: 33 waits and
// 9.6 ms per dcgan64 step on an H200). 64 buffers hold two steps' uploads: the copy a
// reused buffer waits for is then long done, unless the host runs two steps ahead.
constexpr int kStagingSlots = 64;
constexpr size_t kStagingMinBytes = 16 * 1024;  // a buffer's first size: no regrowth (cudaFreeHost waits)
constexpr int kCacheEntries = 64;

struct Slot {
  void* ptr[kMaxPointers];
  int64_t count;
  int64_t start;    // in the concatenated index space, a multiple of kAlign
  int64_t aligned;  // every non-null pointer is 16-byte aligned (int64_t: no padding bytes to compare)
};

// One device's descriptor arrays. A group of tensors is usually updated again and again
// (every optimizer step, every bucket), so the last kCacheEntries arrays stay on the
// device and a call whose descriptors are byte-for-byte those of a cached array launches
// at once; otherwise the least recently used entry is rewritten through a ring of pinned
// host buffers (a buffer is reused once its previous copy has finished: a host wait,
// which the ring's length keeps from waiting for the current step's kernels). Rewriting an
// entry is safe: the copy is ordered after every kernel that read it on the compute stream.
struct Staging {
  struct Entry {
    std::vector<Slot> slots;
    void* array = nullptr;
    size_t capacity = 0;
    uint64_t last_use = 0;
  };

  std::mutex mutex;  // held from the lookup to the launch
  int device = 0;
  int sms = 0;
  tandem::cuda::PinnedBuffer host[kStagingSlots];
  std::unique_ptr<tandem::cuda::CudaEvent> copied[kStagingSlots];
  int next = 0;
  Entry cache[kCacheEntries];
  uint64_t clock = 0;

  const Slot* upload(const std::vector<Slot>& slots) {
    const size_t bytes = slots.size() * sizeof(Slot);
    if (StepCapture* capture = active_capture()) return upload_for_graph(*capture, slots, bytes);
    ++clock;
    for (Entry& e : cache) {
      if (e.slots.size() == slots.size() && std::memcmp(e.slots.data(), slots.data(), bytes) == 0) {
        e.last_use = clock;
        return static_cast<const Slot*>(e.array);
      }
    }
    Entry& e = *std::min_element(std::begin(cache), std::end(cache),
                                 [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    if (bytes > e.capacity) {
      // cudaFree waits for the device, so no queued kernel still reads the old array.
      if (e.array != nullptr) TANDEM_CHECK_CUDA(cudaFree(e.array));
      e.array = nullptr;
      e.capacity = 0;
      const size_t grown = std::max<size_t>(bytes, 64 * sizeof(Slot));
      TANDEM_CHECK_CUDA(cudaMalloc(&e.array, grown));
      e.capacity = grown;
    }
    const int k = next;
    next = (next + 1) % kStagingSlots;
    if (copied[k]) {
      if (!copied[k]->done()) copied[k]->synchronize();  // a wait only when the copy is still queued
    } else {
      copied[k] = std::make_unique<tandem::cuda::CudaEvent>();
    }
    host[k].reserve(std::max(bytes, kStagingMinBytes));
    std::memcpy(host[k].data(), slots.data(), bytes);
    TANDEM_CHECK_CUDA(cudaMemcpyAsync(e.array, host[k].data(), bytes, cudaMemcpyHostToDevice,
                                      tandem::cuda::compute_stream()));
    copied[k]->record(tandem::cuda::compute_stream());
    e.slots = slots;
    e.last_use = clock;
    return static_cast<const Slot*>(e.array);
  }

  // While a step is captured into a graph the cached arrays cannot serve: an eager call
  // may rewrite one between replays. The graph gets arrays of its own (kept alive by its
  // StepCapture), filled by a captured copy from a pinned buffer whose contents never
  // change (the same descriptors at every replay).
  static const Slot* upload_for_graph(StepCapture& capture, const std::vector<Slot>& slots, size_t bytes) {
    void* array = nullptr;
    void* host = nullptr;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // neither call is a stream operation
    TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t malloc_rc = cudaMalloc(&array, bytes);
    const cudaError_t host_rc =
        malloc_rc == cudaSuccess ? cudaHostAlloc(&host, bytes, cudaHostAllocDefault) : cudaSuccess;
    TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
    if (array != nullptr) capture.keep_alive(std::shared_ptr<void>(array, [](void* p) { cudaFree(p); }));
    if (host != nullptr) capture.keep_alive(std::shared_ptr<void>(host, [](void* p) { cudaFreeHost(p); }));
    TANDEM_CHECK_CUDA(malloc_rc);
    TANDEM_CHECK_CUDA(host_rc);
    std::memcpy(host, slots.data(), bytes);
    TANDEM_CHECK_CUDA(
        cudaMemcpyAsync(array, host, bytes, cudaMemcpyHostToDevice, tandem::cuda::compute_stream()));
    return static_cast<const Slot*>(array);
  }
};

// Never destroyed: the driver may be gone by the time static destructors run.
inline Staging& staging(int device) {
  static std::mutex mutex;
  static std::vector<Staging*> all;
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= all.size()) all.resize(static_cast<size_t>(device) + 1, nullptr);
  Staging*& s = all[static_cast<size_t>(device)];
  if (s == nullptr) {
    s = new Staging;
    s->device = device;
    TANDEM_CHECK_CUDA(cudaDeviceGetAttribute(&s->sms, cudaDevAttrMultiProcessorCount, device));
  }
  return *s;
}

// 16-byte vectors of T, and W-wide loads and stores (W = 1: scalar).
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = float4;
  static constexpr int kWidth = 4;
};
template <>
struct Vec16<double> {
  using type = double2;
  static constexpr int kWidth = 2;
};

template <int W, typename T>
__device__ __forceinline__ void load(const void* base, int64_t i, T (&out)[W]) {
  const T* p = static_cast<const T*>(base) + i;
  if constexpr (W == 1) {
    out[0] = *p;
  } else {
    const auto v = *reinterpret_cast<const typename Vec16<T>::type*>(p);
    std::memcpy(out, &v, sizeof(v));
  }
}

template <int W, typename T>
__device__ __forceinline__ void store(void* base, int64_t i, const T (&in)[W]) {
  T* p = static_cast<T*>(base) + i;
  if constexpr (W == 1) {
    *p = in[0];
  } else {
    typename Vec16<T>::type v;
    std::memcpy(&v, in, sizeof(v));
    *reinterpret_cast<typename Vec16<T>::type*>(p) = v;
  }
}

// Rounded single operations: nvcc would otherwise contract a * b + c into an FMA, and the
// results would differ from the CPU twins in the last bit.
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ double sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }

// The ops (optim.cu, bucket_ops.cu) are functors with kUnroll, kChunk and
// template <int W, int U> operator()(const Slot& s, int64_t i, int64_t stride).
// Each op handles U groups of W elements, at i, i + stride, ..., loading all of them
// before storing any: the compiler cannot move a load above a store through pointers that
// might alias, so this is what keeps several loads in flight per thread. kUnroll and
// kChunk (elements a block takes at a time, a multiple of kAlign) were tuned on an H100:
// the optimizers gain from four groups in flight; the copy is fastest with one and small
// interleaved chunks (more registers cost it occupancy).

// Blocks take chunks grid-stride, so the blocks in flight sweep one region of memory
// together (better for DRAM than each block streaming its own far-apart share). The
// slots' start offsets are searched in shared memory when they fit there.
template <typename T, typename Op>
__global__ void __launch_bounds__(kThreads)
    multi_tensor_kernel(const Slot* __restrict__ slots, int n, int64_t total, Op op) {
  constexpr int kWidth = Vec16<T>::kWidth;
  constexpr int kUnroll = Op::kUnroll;
  constexpr int64_t kChunk = Op::kChunk;
  extern __shared__ int64_t starts[];
  const bool in_shared = n <= kSharedStarts;
  if (in_shared) {
    for (int t = threadIdx.x; t < n; t += blockDim.x) starts[t] = slots[t].start;
    __syncthreads();
  }
  for (int64_t begin = int64_t(blockIdx.x) * kChunk; begin < total; begin += int64_t(gridDim.x) * kChunk) {
    const int64_t end = min(begin + kChunk, total);
    // The last slot starting at or before `begin` (the whole block agrees, so no divergence).
    int lo = 0, hi = n - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if ((in_shared ? starts[mid] : slots[mid].start) <= begin) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    for (int t = lo; t < n; ++t) {
      const Slot s = slots[t];
      if (s.start >= end) break;
      const int64_t a = max(begin, s.start) - s.start;
      const int64_t b = min(end, s.start + s.count) - s.start;
      if (a >= b) continue;  // the chunk starts in this slot's padding
      int64_t i = a + threadIdx.x;
      if (s.aligned) {
        const int64_t body_end = a + (b - a) / kWidth * kWidth;
        const int64_t stride = int64_t(blockDim.x) * kWidth;
        int64_t v = a + int64_t(threadIdx.x) * kWidth;
        for (; v + (kUnroll - 1) * stride < body_end; v += kUnroll * stride)
          op.template operator()<kWidth, kUnroll>(s, v, stride);
        for (; v < body_end; v += stride) op.template operator()<kWidth, 1>(s, v, stride);
        i = body_end + threadIdx.x;
      }
      for (; i < b; i += blockDim.x) op.template operator()<1, 1>(s, i, 1);
    }
  }
}

inline bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Lays the slots end to end (dropping empty ones) and launches one kernel over them.
template <typename T, typename Op>
void launch(Device device, std::vector<Slot>& slots, const Op& op) {
  int64_t total = 0;
  size_t kept = 0;
  for (Slot& s : slots) {
    if (s.count == 0) continue;
    s.start = total;
    s.aligned = 1;
    for (void* p : s.ptr) s.aligned = s.aligned && aligned16(p);
    total += (s.count + kAlign - 1) / kAlign * kAlign;
    slots[kept++] = s;
  }
  slots.resize(kept);
  if (total == 0) return;
  TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
  Staging& st = staging(device.index);
  std::lock_guard<std::mutex> lock(st.mutex);
  const Slot* device_slots = st.upload(slots);
  // One wave of resident blocks (sized for the largest shared-memory use); the grid-stride
  // loop covers the rest.
  const size_t shared =
      slots.size() <= static_cast<size_t>(kSharedStarts) ? slots.size() * sizeof(int64_t) : 0;
  static const int per_sm = [] {
    int n = 0;
    TANDEM_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, multi_tensor_kernel<T, Op>, kThreads,
                                                                    kSharedStarts * sizeof(int64_t)));
    return std::max(1, n);
  }();
  const int64_t chunks = (total + Op::kChunk - 1) / Op::kChunk;
  const int blocks = static_cast<int>(std::min<int64_t>(chunks, int64_t{st.sms} * per_sm));
  multi_tensor_kernel<T, Op><<<blocks, kThreads, shared, tandem::cuda::compute_stream()>>>(
      device_slots, static_cast<int>(slots.size()), total, op);
  TANDEM_CHECK_LAUNCH();
}

inline Slot make_slot(int64_t count, void* p0, void* p1, void* p2 = nullptr, void* p3 = nullptr) {
  Slot s{};
  s.ptr[0] = p0;
  s.ptr[1] = p1;
  s.ptr[2] = p2;
  s.ptr[3] = p3;
  s.count = count;
  return s;
}

template <typename Fn>
void with_float_type(DType dtype, Fn&& fn) {
  if (dtype == DType::f32) {
    fn(static_cast<float*>(nullptr));
  } else {
    fn(static_cast<double*>(nullptr));
  }
}

}  // namespace tandem::kernels::cuda::multi_tensor_detail
