#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "runtime/cuda/device_ops.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"

namespace tandem::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 32 ? (blocks == 0 ? 1 : blocks) : 65535 * 32);
}

// Every dtype goes through double; the 16-bit ones round to nearest even through float.
// Integers are exact up to 2^53, which covers every value tandem converts between dtypes
// on a device (copies within one dtype are plain copies).
template <typename T>
struct Io {
  __device__ static double load(const T* p, int64_t i) { return static_cast<double>(p[i]); }
  __device__ static void store(T* p, int64_t i, double v) { p[i] = static_cast<T>(v); }
};
template <>
struct Io<__half> {
  __device__ static double load(const __half* p, int64_t i) { return __half2float(p[i]); }
  __device__ static void store(__half* p, int64_t i, double v) {
    p[i] = __float2half_rn(static_cast<float>(v));
  }
};
template <>
struct Io<__nv_bfloat16> {
  __device__ static double load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
  __device__ static void store(__nv_bfloat16* p, int64_t i, double v) {
    p[i] = __float2bfloat16_rn(static_cast<float>(v));
  }
};

template <typename T>
__global__ void fill_kernel(T* dst, int64_t count, double value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    Io<T>::store(dst, i, value);
}

// float32 and float16/bfloat16 convert through float; only float64 needs double.
template <typename D, typename S>
__global__ void convert_kernel(D* dst, const S* src, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    Io<D>::store(dst, i, Io<S>::load(src, i));
}

template <typename Fn>
void with_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32:
      fn(static_cast<float*>(nullptr));
      return;
    case DType::f64:
      fn(static_cast<double*>(nullptr));
      return;
    case DType::f16:
      fn(static_cast<__half*>(nullptr));
      return;
    case DType::bf16:
      fn(static_cast<__nv_bfloat16*>(nullptr));
      return;
    case DType::i32:
      fn(static_cast<int32_t*>(nullptr));
      return;
    case DType::i64:
      fn(static_cast<int64_t*>(nullptr));
      return;
    case DType::u8:
      fn(static_cast<uint8_t*>(nullptr));
      return;
  }
}

}  // namespace

void device_fill(void* dst, Device device, DType dtype, int64_t count, double value) {
  if (count == 0) return;
  TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
  with_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    fill_kernel<T><<<blocks_for(count), kThreads, 0, compute_stream()>>>(static_cast<T*>(dst), count, value);
  });
  TANDEM_CHECK_LAUNCH();
}

void device_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count,
                    Device device) {
  if (count == 0) return;
  TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
  with_type(dst_dtype, [&](auto* dst_tag) {
    with_type(src_dtype, [&](auto* src_tag) {
      using D = std::remove_pointer_t<decltype(dst_tag)>;
      using S = std::remove_pointer_t<decltype(src_tag)>;
      convert_kernel<D, S><<<blocks_for(count), kThreads, 0, compute_stream()>>>(
          static_cast<D*>(dst), static_cast<const S*>(src), count);
    });
  });
  TANDEM_CHECK_LAUNCH();
}

}  // namespace tandem::cuda
