// Private to kernels/cuda/*.cu: the launch configuration, device checks and pointer casts
// the kernel files share.
//
// Everything is in an unnamed namespace, as it was when each .cu held its own copy: every
// translation unit compiles the kernels it uses for itself, and no kernel symbol is shared
// between two of them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 32;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks of kThreads for one thread per element, at most max_blocks: the kernels loop
// grid-stride over the rest.
inline int blocks_for(int64_t count, int64_t max_blocks = kMaxBlocks) {
  return static_cast<int>(std::min(ceil_div(count, kThreads), max_blocks));
}

inline cudaStream_t stream() { return ::tandem::cuda::compute_stream(); }

// A routed call can still receive a CPU tensor if called directly; launching on a host
// pointer would be an illegal address far from the cause.
inline void require_cuda(const char* op, const Tensor& t) {
  TANDEM_CHECK(t.device().is_cuda(), op << ": the CUDA kernel needs a GPU tensor, got " << t.str());
}

inline void set_device(const Tensor& t) { TANDEM_CHECK_CUDA(cudaSetDevice(t.device().index)); }

template <typename T>
const T* ptr(const Tensor& t) {
  return static_cast<const T*>(t.raw_data());
}

template <typename T>
T* mut_ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace
}  // namespace tandem::kernels::cuda
