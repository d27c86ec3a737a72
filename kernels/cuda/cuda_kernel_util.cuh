// Private to kernels/cuda/*.cu: the launch configuration, device checks and pointer casts
// the kernel files share, and the grid-stride map kernels (with their float / double device
// math) that run the elementwise, activation and loss ops.
//
// Everything is in an unnamed namespace, as it was when each .cu held its own copy: every
// translation unit compiles the kernels it uses for itself, and no kernel symbol is shared
// between two of them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/dispatch.h"
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

// Math by overload. The names are qualified with :: because this namespace declares
// tensor functions called exp, log, sqrt and tanh, which would hide the device ones.
__device__ inline float d_exp(float x) { return ::expf(x); }
__device__ inline double d_exp(double x) { return ::exp(x); }
__device__ inline float d_log(float x) { return ::logf(x); }
__device__ inline double d_log(double x) { return ::log(x); }
__device__ inline float d_log1p(float x) { return ::log1pf(x); }
__device__ inline double d_log1p(double x) { return ::log1p(x); }
__device__ inline float d_sqrt(float x) { return ::sqrtf(x); }
__device__ inline double d_sqrt(double x) { return ::sqrt(x); }
__device__ inline float d_tanh(float x) { return ::tanhf(x); }
__device__ inline double d_tanh(double x) { return ::tanh(x); }
__device__ inline float d_abs(float x) { return ::fabsf(x); }
__device__ inline double d_abs(double x) { return ::fabs(x); }

// std::max(x, 0) as the CPU writes it: returns x unless x < 0 (so NaN stays NaN).
template <typename T>
__device__ T max_zero(T x) {
  return x < T(0) ? T(0) : x;
}

template <typename T>
__device__ T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + d_exp(-x));
  const T e = d_exp(x);
  return e / (T(1) + e);
}

// The grid-stride map kernels: out[i] = f(x[i]) or f(a[i], b[i]) for each op's functor.
template <typename T, typename F>
__global__ void unary_kernel(const T* x, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(x[i]);
}

// `out` may alias `a` (the in-place ops).
template <typename T, typename F>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(a[i], b[i]);
}

// dispatch.h's check_same_operands, on a GPU.
inline void check_same_layout(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                              const char* b_name) {
  check_same_operands(op, a, a_name, b, b_name);
  require_cuda(op, a);
}

template <typename F>
void launch_unary(const char* op, const Tensor& x, Tensor& out, F f) {
  const int64_t n = x.numel();
  if (n == 0) return;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    unary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), n, f);
    TANDEM_CHECK_LAUNCH();
  });
}

template <typename F>
void launch_binary(const char* op, const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = a.numel();
  if (n == 0) return;
  set_device(a);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    binary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
        static_cast<T*>(out.raw_data()), n, f);
    TANDEM_CHECK_LAUNCH();
  });
}

// out = f(a, b) after the checks of a same-shape binary op, whose errors name the operands
// a_name and b_name.
template <typename F>
Tensor binary(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name, F f) {
  check_same_layout(op, a, a_name, b, b_name);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  launch_binary(op, a, b, out, f);
  return out;
}

template <typename F>
Tensor unary(const char* op, const char* what, const Tensor& a, F f) {
  check_defined(op, a, what);
  require_cuda(op, a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  launch_unary(op, a, out, f);
  return out;
}

}  // namespace
}  // namespace tandem::kernels::cuda
