// Private to reduce.cu, norm.cu and elementwise.cu (bias_grad): the deterministic sum kernels.
//
// Every sum (sum_all, sum_axis, bias_grad, the batch-norm statistics) goes through three
// kernels that accumulate in double, as the CPU twins mostly do, and use no atomics: the
// order of additions depends only on the shape, so results are deterministic.
// - rows: one warp per contiguous row (reducing the last axis, or a whole tensor);
// - columns: [outer, size, inner] summed over `size`, 32 adjacent columns per block so
//   loads stay coalesced;
// - channels: [n, c, inner] summed over n and inner for each c, one warp per channel.
// When there are too few outputs to fill the GPU, the summed range is cut into segments
// whose partial sums (double) a second pass adds up.
//
// In an unnamed namespace, as cuda_kernel_util.cuh: each includer compiles its own
// instantiations, so no kernel symbol is shared between translation units.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_kernel_util.cuh"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kThreads / kWarp;
constexpr int kColumnRows = kThreads / kWarp;  // the y extent of a column block (32 x 8)
constexpr int64_t kMaxGridY = 65535;
// Enough independent sums (warps, or column blocks) to keep every SM of a large GPU busy;
// below that, long sums are split into segments of at least kMinSegment elements.
constexpr int64_t kTargetWarps = 4096;
constexpr int64_t kTargetColumnBlocks = 1024;
constexpr int64_t kMinSegment = 1024;
constexpr int64_t kMinColumnSegment = 256;

// What a sum adds up: load(index, channel) is the term for element `index` of the tensor,
// `channel` being the row, column or channel the element is summed into.
template <typename T>
struct Plain {
  const T* x;
  __device__ double operator()(int64_t index, int64_t) const { return static_cast<double>(x[index]); }
};

__device__ inline double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// The final store: cast to Out, then divide by `divisor` in Out when it is positive (the
// means, which the CPU also divide after casting).
template <typename Out>
__device__ Out finish(double acc, int64_t divisor) {
  Out v = static_cast<Out>(acc);
  if (divisor > 0) v = v / static_cast<Out>(divisor);
  return v;
}

// out[r * splits + s] = sum of load(r * len + k, r) over k in segment s of row r, that is
// [s * seg, min(len, (s + 1) * seg)). One warp per output.
template <typename Load, typename Out>
__global__ void row_sum_kernel(Load load, Out* out, int64_t rows, int64_t len, int64_t splits, int64_t seg,
                               int64_t divisor) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t o = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; o < rows * splits; o += warps) {
    const int64_t r = o / splits, begin = (o % splits) * seg, end = min(len, begin + seg);
    double acc = 0;
    for (int64_t k = begin + lane; k < end; k += kWarp) acc += load(r * len + k, r);
    acc = warp_sum(acc);
    if (lane == 0) out[o] = finish<Out>(acc, divisor);
  }
}

// out[(o * splits + s) * inner + i] = sum of load((o * size + k) * inner + i, i) over k in
// segment s. A 32 x 8 block: x picks the column, y strides through the segment, and the 8
// partial sums of a column meet in shared memory.
template <typename Load, typename Out>
__global__ void column_sum_kernel(Load load, Out* out, int64_t outer, int64_t size, int64_t inner,
                                  int64_t splits, int64_t seg, int64_t divisor) {
  __shared__ double partial[kColumnRows][kWarp + 1];
  const int64_t i = blockIdx.x * int64_t(kWarp) + threadIdx.x;
  for (int64_t g = blockIdx.y; g < outer * splits; g += gridDim.y) {
    const int64_t o = g / splits, begin = (g % splits) * seg, end = min(size, begin + seg);
    double acc = 0;
    if (i < inner)
      for (int64_t k = begin + threadIdx.y; k < end; k += kColumnRows)
        acc += load((o * size + k) * inner + i, i);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      double sum = 0;
      for (int r = 0; r < kColumnRows; ++r) sum += partial[r][threadIdx.x];
      out[g * inner + i] = finish<Out>(sum, divisor);
    }
    __syncthreads();
  }
}

// x as [n, c, inner]: out[ch * splits + s] = sum of load(index, ch) over segment s of the
// channel's n * inner elements, taken in (i, j) order; element k of the channel is
// (i, j) = (k / inner, k % inner) at index (i * c + ch) * inner + j. Each lane steps k by
// 32, so (i, j) advances by a fixed amount instead of being divided out every time.
template <typename Load, typename Out>
__global__ void channel_sum_kernel(Load load, Out* out, int64_t n, int64_t c, int64_t inner, int64_t splits,
                                   int64_t seg, int64_t divisor) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / kWarp);
  const int64_t len = n * inner, step_i = kWarp / inner, step_j = kWarp % inner;
  for (int64_t o = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kWarp; o < c * splits; o += warps) {
    const int64_t ch = o / splits, begin = (o % splits) * seg, end = min(len, begin + seg);
    int64_t k = begin + lane, i = k / inner, j = k % inner;
    double acc = 0;
    for (; k < end; k += kWarp) {
      acc += load((i * c + ch) * inner + j, ch);
      i += step_i;
      j += step_j;
      if (j >= inner) {
        j -= inner;
        ++i;
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) out[o] = finish<Out>(acc, divisor);
  }
}

inline int warp_blocks_for(int64_t warps) {
  return static_cast<int>(std::min(ceil_div(warps, kWarpsPerBlock), kMaxBlocks));
}

// How many segments to cut each of `sums` sums of `len` terms into.
inline int64_t splits_for(int64_t sums, int64_t len, int64_t target, int64_t min_segment) {
  if (sums >= target || len <= min_segment) return 1;
  return std::min(ceil_div(target, sums), ceil_div(len, min_segment));
}

// out[r] = sum over k < len of load(r * len + k, r), for r < rows.
template <typename Load, typename Out>
void row_sums(Device device, Load load, Out* out, int64_t rows, int64_t len, int64_t divisor) {
  if (rows == 0) return;
  const int64_t splits = splits_for(rows, len, kTargetWarps, kMinSegment), seg = ceil_div(len, splits);
  if (splits == 1) {
    row_sum_kernel<<<warp_blocks_for(rows), kThreads, 0, stream()>>>(load, out, rows, len, 1, len, divisor);
    TANDEM_CHECK_LAUNCH();
    return;
  }
  Tensor partial = Tensor::empty({rows * splits}, DType::f64, device);
  double* p = mut_ptr<double>(partial);
  row_sum_kernel<<<warp_blocks_for(rows * splits), kThreads, 0, stream()>>>(load, p, rows, len, splits, seg,
                                                                            int64_t{0});
  TANDEM_CHECK_LAUNCH();
  row_sum_kernel<<<warp_blocks_for(rows), kThreads, 0, stream()>>>(Plain<double>{p}, out, rows, splits,
                                                                   int64_t{1}, splits, divisor);
  TANDEM_CHECK_LAUNCH();
}

template <typename Load, typename Out>
void launch_column_sum(Load load, Out* out, int64_t outer, int64_t size, int64_t inner, int64_t splits,
                       int64_t seg, int64_t divisor) {
  const dim3 grid(static_cast<unsigned>(ceil_div(inner, kWarp)),
                  static_cast<unsigned>(std::min(outer * splits, kMaxGridY)));
  column_sum_kernel<<<grid, dim3(kWarp, kColumnRows), 0, stream()>>>(load, out, outer, size, inner, splits,
                                                                     seg, divisor);
  TANDEM_CHECK_LAUNCH();
}

// out[o * inner + i] = sum over k < size of load((o * size + k) * inner + i, i).
template <typename Load, typename Out>
void column_sums(Device device, Load load, Out* out, int64_t outer, int64_t size, int64_t inner,
                 int64_t divisor) {
  if (outer == 0 || inner == 0) return;
  const int64_t blocks = outer * ceil_div(inner, kWarp);
  const int64_t splits = splits_for(blocks, size, kTargetColumnBlocks, kMinColumnSegment),
                seg = ceil_div(size, splits);
  if (splits == 1) {
    launch_column_sum(load, out, outer, size, inner, int64_t{1}, size, divisor);
    return;
  }
  Tensor partial = Tensor::empty({outer * splits * inner}, DType::f64, device);
  double* p = mut_ptr<double>(partial);
  launch_column_sum(load, p, outer, size, inner, splits, seg, int64_t{0});
  launch_column_sum(Plain<double>{p}, out, outer, splits, inner, int64_t{1}, splits, divisor);
}

// For x as [n, c, inner]: out[ch] = sum of load(index, ch) over the n * inner elements of
// channel ch.
template <typename Load, typename Out>
void channel_sums(Device device, Load load, Out* out, int64_t n, int64_t c, int64_t inner, int64_t divisor) {
  if (c == 0) return;
  if (n * inner == 0) {  // nothing to add: every channel gets finish(0)
    row_sums(device, load, out, c, int64_t{0}, divisor);
    return;
  }
  if (inner == 1) {  // [n, c]: a column sum keeps the loads coalesced
    column_sums(device, load, out, int64_t{1}, n, c, divisor);
    return;
  }
  const int64_t len = n * inner;
  const int64_t splits = splits_for(c, len, kTargetWarps, kMinSegment), seg = ceil_div(len, splits);
  if (splits == 1) {
    channel_sum_kernel<<<warp_blocks_for(c), kThreads, 0, stream()>>>(load, out, n, c, inner, int64_t{1}, len,
                                                                      divisor);
    TANDEM_CHECK_LAUNCH();
    return;
  }
  Tensor partial = Tensor::empty({c * splits}, DType::f64, device);
  double* p = mut_ptr<double>(partial);
  channel_sum_kernel<<<warp_blocks_for(c * splits), kThreads, 0, stream()>>>(load, p, n, c, inner, splits,
                                                                             seg, int64_t{0});
  TANDEM_CHECK_LAUNCH();
  row_sum_kernel<<<warp_blocks_for(c), kThreads, 0, stream()>>>(Plain<double>{p}, out, c, splits, int64_t{1},
                                                                splits, divisor);
  TANDEM_CHECK_LAUNCH();
}

}  // namespace
}  // namespace tandem::kernels::cuda
