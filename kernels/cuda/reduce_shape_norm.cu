// Reductions, factor-2 resampling, concat/slice and batch norm.
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
#include <algorithm>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/axis_layout.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/norm_cuda.h"
#include "kernels/cuda/pool_cuda.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/shape_ops_cuda.h"
#include "kernels/dispatch.h"
#include "kernels/norm_layout.h"

namespace tandem::kernels::cuda {

using axis_detail::normalize_axis;
using axis_detail::split_at;

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

// ---- sums ---------------------------------------------------------------------------

// What a sum adds up: load(index, channel) is the term for element `index` of the tensor,
// `channel` being the row, column or channel the element is summed into.
template <typename T>
struct Plain {
  const T* x;
  __device__ double operator()(int64_t index, int64_t) const { return static_cast<double>(x[index]); }
};

template <typename T>
struct CenteredSquare {  // (x - mean)^2, for the variance about the mean
  const T* x;
  const double* mean;
  __device__ double operator()(int64_t index, int64_t channel) const {
    const double d = static_cast<double>(x[index]) - mean[channel];
    return d * d;
  }
};

template <typename T>
struct GradCentered {  // g (x - mean), for the batch-norm backward
  const T* grad;
  const T* x;
  const T* mean;
  __device__ double operator()(int64_t index, int64_t channel) const {
    return static_cast<double>(grad[index]) *
           (static_cast<double>(x[index]) - static_cast<double>(mean[channel]));
  }
};

__device__ double warp_sum(double v) {
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
__global__ void column_sum_kernel(Load load, Out* out, int64_t outer, int64_t size, int64_t inner, int64_t splits,
                                  int64_t seg, int64_t divisor) {
  __shared__ double partial[kColumnRows][kWarp + 1];
  const int64_t i = blockIdx.x * int64_t(kWarp) + threadIdx.x;
  for (int64_t g = blockIdx.y; g < outer * splits; g += gridDim.y) {
    const int64_t o = g / splits, begin = (g % splits) * seg, end = min(size, begin + seg);
    double acc = 0;
    if (i < inner)
      for (int64_t k = begin + threadIdx.y; k < end; k += kColumnRows) acc += load((o * size + k) * inner + i, i);
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

int warp_blocks_for(int64_t warps) {
  return static_cast<int>(std::min(ceil_div(warps, kWarpsPerBlock), kMaxBlocks));
}

// How many segments to cut each of `sums` sums of `len` terms into.
int64_t splits_for(int64_t sums, int64_t len, int64_t target, int64_t min_segment) {
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
  row_sum_kernel<<<warp_blocks_for(rows), kThreads, 0, stream()>>>(Plain<double>{p}, out, rows, splits, int64_t{1},
                                                                   splits, divisor);
  TANDEM_CHECK_LAUNCH();
}

template <typename Load, typename Out>
void launch_column_sum(Load load, Out* out, int64_t outer, int64_t size, int64_t inner, int64_t splits, int64_t seg,
                       int64_t divisor) {
  const dim3 grid(static_cast<unsigned>(ceil_div(inner, kWarp)), static_cast<unsigned>(std::min(outer * splits, kMaxGridY)));
  column_sum_kernel<<<grid, dim3(kWarp, kColumnRows), 0, stream()>>>(load, out, outer, size, inner, splits, seg,
                                                                      divisor);
  TANDEM_CHECK_LAUNCH();
}

// out[o * inner + i] = sum over k < size of load((o * size + k) * inner + i, i).
template <typename Load, typename Out>
void column_sums(Device device, Load load, Out* out, int64_t outer, int64_t size, int64_t inner, int64_t divisor) {
  if (outer == 0 || inner == 0) return;
  const int64_t blocks = outer * ceil_div(inner, kWarp);
  const int64_t splits = splits_for(blocks, size, kTargetColumnBlocks, kMinColumnSegment), seg = ceil_div(size, splits);
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
  channel_sum_kernel<<<warp_blocks_for(c * splits), kThreads, 0, stream()>>>(load, p, n, c, inner, splits, seg,
                                                                             int64_t{0});
  TANDEM_CHECK_LAUNCH();
  row_sum_kernel<<<warp_blocks_for(c), kThreads, 0, stream()>>>(Plain<double>{p}, out, c, splits, int64_t{1}, splits,
                                                                divisor);
  TANDEM_CHECK_LAUNCH();
}

// ---- elementwise helpers of this file ------------------------------------------------

template <typename T>
__global__ void expand_kernel(const T* grad, T* out, int64_t count, int64_t size, int64_t inner) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = idx / (size * inner), j = idx % inner;
    out[idx] = grad[o * inner + j];
  }
}

// Bit copies of one element, so every dtype (16-bit ones too) works as on the CPU.
template <typename Bits>
__global__ void broadcast_kernel(const Bits* value, Bits* out, int64_t count) {
  const Bits v = *value;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x)
    out[idx] = v;
}

// out [planes, h, w] = s * in [planes, 2h, 2w] summed over each 2x2 block. Output row r
// (plane p, row i, so r = p h + i) reads input rows 2r and 2r + 1.
template <typename T>
__global__ void block_sum_kernel(const T* in, T* out, int64_t count, int64_t w, T s) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = idx / w, j = idx % w;
    const T* r0 = in + 2 * r * 2 * w + 2 * j;
    const T* r1 = r0 + 2 * w;
    out[idx] = s * (r0[0] + r0[1] + r1[0] + r1[1]);
  }
}

// out [planes, 2h, 2w] = s * in [planes, h, w] repeated over each 2x2 block: one thread
// per input pixel (row r = p h + i, column j) writes output rows 2r and 2r + 1.
template <typename T>
__global__ void block_repeat_kernel(const T* in, T* out, int64_t count, int64_t w, T s) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = idx / w, j = idx % w;
    const T v = s * in[idx];
    T* o0 = out + 2 * r * 2 * w + 2 * j;
    T* o1 = o0 + 2 * w;
    o0[0] = o0[1] = o1[0] = o1[1] = v;
  }
}

// Copies `outer` blocks of `count` elements from src (stride src_stride) to dst (stride
// dst_stride).
template <typename T>
__global__ void copy_blocks_kernel(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t outer,
                                   int64_t count) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < outer * count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = idx / count, r = idx % count;
    dst[o * dst_stride + r] = src[o * src_stride + r];
  }
}

template <typename T>
void copy_blocks(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t outer, int64_t count) {
  if (outer * count == 0) return;
  copy_blocks_kernel<<<blocks_for(outer * count), kThreads, 0, stream()>>>(src, src_stride, dst, dst_stride, outer,
                                                                         count);
  TANDEM_CHECK_LAUNCH();
}

// y = (x - T(center[ch])) * T(a[ch]) + T(b[ch]) with ch the channel (axis 1) of x as
// [n, c, inner]; the per-channel values are double, cast to T as on the CPU.
template <typename T>
__global__ void affine_kernel(const T* x, const double* center, const double* a, const double* b, T* y, int64_t count,
                              int64_t c, int64_t inner) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ch = (idx / inner) % c;
    y[idx] = (x[idx] - static_cast<T>(center[ch])) * static_cast<T>(a[ch]) + static_cast<T>(b[ch]);
  }
}

// ---- argument checks (the CPU twins' messages) ----------------------------------------

void check_nchw(const char* op, const Tensor& x, const char* what) {
  check_defined(op, x, what);
  TANDEM_CHECK(x.dim() == 4, op << ": needs a 4-D [N, C, H, W] " << what << ", got " << shape_str(x.shape()));
  require_cuda(op, x);
}

void check_even(const char* op, const Tensor& x, const char* what) {
  TANDEM_CHECK(x.size(2) % 2 == 0 && x.size(3) % 2 == 0,
               op << ": needs even H and W, got " << what << " " << shape_str(x.shape()));
}

using norm_detail::check_channel;
using norm_detail::Layout;

Layout layout_of(const char* op, const Tensor& x) {
  Layout s = norm_detail::layout_of(op, x);
  require_cuda(op, x);
  return s;
}

// A device pointer to an optional per-channel tensor, null when it is undefined.
template <typename T>
T* optional_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// ---- batch-norm per-channel steps -------------------------------------------------------

// From the channel sums of x and of (x - mean)^2: saved mean and inverse std, the affine
// coefficients a = gamma inv_std and b = beta, and the running-stat update (unbiased).
template <typename T>
__global__ void bn_train_channels_kernel(const double* mean, const double* sq_dev, const T* gamma, const T* beta,
                                         T* running_mean, T* running_var, T* saved_mean, T* saved_inv_std, double* a,
                                         double* b, int64_t c, double count, double momentum, double eps) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c; ch += int64_t(blockDim.x) * gridDim.x) {
    const double inv_std = 1.0 / ::sqrt(sq_dev[ch] / count + eps);
    saved_mean[ch] = static_cast<T>(mean[ch]);
    saved_inv_std[ch] = static_cast<T>(inv_std);
    a[ch] = (gamma ? gamma[ch] : T(1)) * inv_std;
    b[ch] = beta ? beta[ch] : T(0);
    if (running_mean) running_mean[ch] = static_cast<T>((1 - momentum) * running_mean[ch] + momentum * mean[ch]);
    if (running_var)
      running_var[ch] = static_cast<T>((1 - momentum) * running_var[ch] + momentum * sq_dev[ch] / (count - 1));
  }
}

template <typename T>
__global__ void bn_eval_channels_kernel(const T* running_mean, const T* running_var, const T* gamma, const T* beta,
                                        double* center, double* a, double* b, int64_t c, double eps) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c; ch += int64_t(blockDim.x) * gridDim.x) {
    const double inv_std = 1.0 / ::sqrt(static_cast<double>(running_var[ch]) + eps);
    center[ch] = running_mean[ch];
    a[ch] = (gamma ? gamma[ch] : T(1)) * inv_std;
    b[ch] = beta ? beta[ch] : T(0);
  }
}

// dx = g a + (x - mean) b + c per channel, with a = gamma inv_std, b = -a inv_std
// sum(g xhat) / count, c = -a sum(g) / count; also the gamma and beta gradients.
template <typename T>
__global__ void bn_backward_channels_kernel(const double* sum_g, const double* sum_g_centered, const T* inv_std,
                                            const T* gamma, T* grad_gamma, T* grad_beta, double* a, double* b,
                                            double* cc, int64_t c, double count) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c; ch += int64_t(blockDim.x) * gridDim.x) {
    const double is = inv_std[ch];
    const double sum_gx = sum_g_centered[ch] * is;
    const double scale = (gamma ? gamma[ch] : T(1)) * is;
    a[ch] = scale;
    b[ch] = -scale * is * sum_gx / count;
    cc[ch] = -scale * sum_g[ch] / count;
    grad_gamma[ch] = static_cast<T>(sum_gx);
    grad_beta[ch] = static_cast<T>(sum_g[ch]);
  }
}

template <typename T>
__global__ void bn_backward_input_kernel(const T* grad, const T* x, const T* mean, const double* a, const double* b,
                                         const double* cc, T* dx, int64_t count, int64_t c, int64_t inner) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ch = (idx / inner) % c;
    dx[idx] = grad[idx] * static_cast<T>(a[ch]) + (x[idx] - mean[ch]) * static_cast<T>(b[ch]) +
              static_cast<T>(cc[ch]);
  }
}

}  // namespace

// ---- reduce.h -----------------------------------------------------------------------

namespace {

Tensor sum_all_impl(const Tensor& x, bool mean) {
  check_defined("sum", x, "input");
  require_cuda("sum", x);
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  set_device(x);
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    row_sums(x.device(), Plain<T>{ptr<T>(x)}, mut_ptr<T>(out), int64_t{1}, x.numel(), mean ? x.numel() : 0);
  });
  return out;
}

Tensor sum_axis_impl(const Tensor& x, int64_t axis, bool keepdim, int64_t divisor) {
  check_defined("sum", x, "input");
  require_cuda("sum", x);
  const int64_t a = normalize_axis("sum", x.shape(), axis);
  int64_t outer, size, inner;
  split_at(x.shape(), a, outer, size, inner);
  Shape shape = x.shape();
  if (keepdim) shape[static_cast<size_t>(a)] = 1;
  else shape.erase(shape.begin() + a);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  set_device(x);
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    if (inner == 1) row_sums(x.device(), Plain<T>{ptr<T>(x)}, mut_ptr<T>(out), outer, size, divisor);
    else column_sums(x.device(), Plain<T>{ptr<T>(x)}, mut_ptr<T>(out), outer, size, inner, divisor);
  });
  return out;
}

}  // namespace

Tensor sum_all(const Tensor& x) { return sum_all_impl(x, false); }

Tensor mean_all(const Tensor& x) {
  TANDEM_CHECK(x.numel() > 0, "mean of an empty tensor " << x.str());
  return sum_all_impl(x, true);
}

Tensor sum_axis(const Tensor& x, int64_t axis, bool keepdim) { return sum_axis_impl(x, axis, keepdim, 0); }

Tensor mean_axis(const Tensor& x, int64_t axis, bool keepdim) {
  const int64_t n = x.size(axis);
  TANDEM_CHECK(n > 0, "mean over an empty axis of " << x.str());
  return sum_axis_impl(x, axis, keepdim, n);
}

Tensor expand_axis(const Tensor& grad, const Shape& shape, int64_t axis) {
  check_defined("expand_axis", grad, "gradient");
  require_cuda("expand_axis", grad);
  const int64_t d = static_cast<int64_t>(shape.size());
  const int64_t a = axis < 0 ? axis + d : axis;
  TANDEM_CHECK(a >= 0 && a < d, "expand_axis: axis " << axis << " out of range for " << shape_str(shape));
  int64_t outer, size, inner;
  split_at(shape, a, outer, size, inner);
  TANDEM_CHECK(grad.numel() == outer * inner, "expand_axis: gradient " << shape_str(grad.shape())
                                                                       << " does not fit " << shape_str(shape)
                                                                       << " reduced over axis " << axis);
  Tensor out = Tensor::empty(shape, grad.dtype(), grad.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(grad);
  dispatch_float("expand_axis", grad.dtype(), [&]<typename T>() {
    expand_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(grad), mut_ptr<T>(out), count, size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor expand_scalar(const Tensor& value, const Shape& shape) {
  TANDEM_CHECK(value.numel() == 1, "expand_scalar: needs one value, got " << value.str());
  require_cuda("expand_scalar", value);
  Tensor out = Tensor::empty(shape, value.dtype(), value.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(value);
  auto launch = [&](auto* tag) {
    using Bits = std::remove_pointer_t<decltype(tag)>;
    broadcast_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<Bits>(value), mut_ptr<Bits>(out), count);
    TANDEM_CHECK_LAUNCH();
  };
  switch (dtype_size(value.dtype())) {
    case 2: launch(static_cast<uint16_t*>(nullptr)); break;
    case 4: launch(static_cast<uint32_t*>(nullptr)); break;
    case 8: launch(static_cast<uint64_t*>(nullptr)); break;
    default: TANDEM_FAIL("expand_scalar: dtype " << dtype_name(value.dtype()) << " is not supported");
  }
  return out;
}

// ---- elementwise.h: bias_grad (a per-channel sum, so it lives with the others) --------

Tensor bias_grad(const Tensor& grad) {
  const char* op = "bias_grad";
  check_defined(op, grad, "gradient");
  TANDEM_CHECK(grad.dim() >= 2, op << ": needs [N, C, ...], got " << shape_str(grad.shape()));
  require_cuda(op, grad);
  const int64_t n = grad.size(0), c = grad.size(1), inner = grad.numel() / (n * c == 0 ? 1 : n * c);
  Tensor out = Tensor::empty({c}, grad.dtype(), grad.device());
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    channel_sums(grad.device(), Plain<T>{ptr<T>(grad)}, mut_ptr<T>(out), n, c, inner, int64_t{0});
  });
  return out;
}

// ---- pool.h -------------------------------------------------------------------------

namespace {

Tensor block_sum(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2) / 2, w = in.size(3) / 2;
  Tensor out = Tensor::empty({in.size(0), in.size(1), h, w}, in.dtype(), in.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(in);
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    block_sum_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(in), mut_ptr<T>(out), count, w,
                                                                   static_cast<T>(scale));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor block_repeat(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2), w = in.size(3);
  Tensor out = Tensor::empty({in.size(0), in.size(1), 2 * h, 2 * w}, in.dtype(), in.device());
  const int64_t count = in.numel();
  if (count == 0) return out;
  set_device(in);
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    block_repeat_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(in), mut_ptr<T>(out), count, w,
                                                                      static_cast<T>(scale));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

Tensor upsample_nearest2x(const Tensor& x) {
  check_nchw("upsample_nearest2x", x, "input");
  return block_repeat("upsample_nearest2x", x, 1.0);
}

Tensor upsample_nearest2x_backward(const Tensor& grad) {
  const char* op = "upsample_nearest2x_backward";
  check_nchw(op, grad, "gradient");
  check_even(op, grad, "gradient");
  return block_sum(op, grad, 1.0);
}

Tensor avg_pool2x(const Tensor& x) {
  const char* op = "avg_pool2x";
  check_nchw(op, x, "input");
  check_even(op, x, "input");
  return block_sum(op, x, 0.25);
}

Tensor avg_pool2x_backward(const Tensor& grad) {
  check_nchw("avg_pool2x_backward", grad, "gradient");
  return block_repeat("avg_pool2x_backward", grad, 0.25);
}

// ---- shape_ops.h --------------------------------------------------------------------

Tensor concat(const std::vector<Tensor>& parts, int64_t axis) {
  const char* op = "concat";
  int64_t a = 0;
  Shape out_shape = axis_detail::concat_shape(op, parts, axis, a);
  const Tensor& first = parts.front();
  require_cuda(op, first);
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t outer, size, inner;
  split_at(out_shape, a, outer, size, inner);
  const int64_t out_stride = size * inner;
  set_device(first);
  dispatch_float(op, first.dtype(), [&]<typename T>() {
    T* po = mut_ptr<T>(out);
    int64_t at = 0;
    for (const Tensor& p : parts) {
      const int64_t block = p.size(a) * inner;
      copy_blocks(ptr<T>(p), block, po + at, out_stride, outer, block);
      at += block;
    }
  });
  return out;
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  const char* op = "slice";
  check_defined(op, x, "input");
  require_cuda(op, x);
  const int64_t a = normalize_axis(op, x.shape(), axis);
  const int64_t size = x.size(a);
  TANDEM_CHECK(start >= 0 && length >= 0 && start + length <= size,
               op << ": range [" << start << ", " << start + length << ") out of bounds of axis " << axis
                  << " of shape " << shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(a)] = length;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  int64_t outer, unused, inner;
  split_at(x.shape(), a, outer, unused, inner);
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    copy_blocks(ptr<T>(x) + start * inner, size * inner, mut_ptr<T>(out), length * inner, outer, length * inner);
  });
  return out;
}

Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t axis, int64_t start) {
  const char* op = "slice_backward";
  check_defined(op, grad, "gradient");
  require_cuda(op, grad);
  const int64_t a = normalize_axis(op, input_shape, axis);
  const int64_t size = input_shape[static_cast<size_t>(a)];
  bool match = grad.dim() == static_cast<int64_t>(input_shape.size());
  for (int64_t i = 0; match && i < grad.dim(); ++i) match = i == a || grad.size(i) == input_shape[static_cast<size_t>(i)];
  TANDEM_CHECK(match && start >= 0 && start + grad.size(a) <= size,
               op << ": gradient " << shape_str(grad.shape()) << " at offset " << start << " of axis " << axis
                  << " does not fit input " << shape_str(input_shape));
  const int64_t length = grad.size(a);
  Tensor out = Tensor::zeros(input_shape, grad.dtype(), grad.device());
  int64_t outer, unused, inner;
  split_at(input_shape, a, outer, unused, inner);
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    copy_blocks(ptr<T>(grad), length * inner, mut_ptr<T>(out) + start * inner, size * inner, outer, length * inner);
  });
  return out;
}

// ---- norm.h -------------------------------------------------------------------------

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps, BatchNormSaved& saved) {
  const char* op = "batch_norm";
  const Layout s = layout_of(op, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, beta, "beta", true);
  check_channel(op, x, running_mean, "running_mean", true);
  check_channel(op, x, running_var, "running_var", true);
  TANDEM_CHECK(s.count() > 1, op << ": training needs more than one value per channel, got input "
                                 << shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  saved.mean = Tensor::empty({s.c}, x.dtype(), x.device());
  saved.inv_std = Tensor::empty({s.c}, x.dtype(), x.device());
  if (s.c == 0) return y;
  // Rows: mean, sum of squared deviations, a, b (double).
  Tensor stats = Tensor::empty({4, s.c}, DType::f64, x.device());
  double* mean = mut_ptr<double>(stats);
  double* sq_dev = mean + s.c;
  double* a = mean + 2 * s.c;
  double* b = mean + 3 * s.c;
  const double count = static_cast<double>(s.count());
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = ptr<T>(x);
    channel_sums(x.device(), Plain<T>{px}, mean, s.n, s.c, s.inner, s.count());
    channel_sums(x.device(), CenteredSquare<T>{px, mean}, sq_dev, s.n, s.c, s.inner, int64_t{0});
    bn_train_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        mean, sq_dev, optional_ptr<const T>(gamma), optional_ptr<const T>(beta), optional_ptr<T>(running_mean),
        optional_ptr<T>(running_var), mut_ptr<T>(saved.mean), mut_ptr<T>(saved.inv_std), a, b, s.c, count, momentum,
        eps);
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (total == 0) return;
    affine_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(px, mean, a, b, mut_ptr<T>(y), total, s.c, s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return y;
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, double eps) {
  const char* op = "batch_norm";
  const Layout s = layout_of(op, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, beta, "beta", true);
  check_channel(op, x, running_mean, "running_mean", false);
  check_channel(op, x, running_var, "running_var", false);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  Tensor coefficients = Tensor::empty({3, s.c}, DType::f64, x.device());  // center, a, b
  double* center = mut_ptr<double>(coefficients);
  double* a = center + s.c;
  double* b = center + 2 * s.c;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    bn_eval_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        ptr<T>(running_mean), ptr<T>(running_var), optional_ptr<const T>(gamma), optional_ptr<const T>(beta), center, a,
        b, s.c, eps);
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    affine_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(ptr<T>(x), center, a, b, mut_ptr<T>(y), total, s.c,
                                                                s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& gamma,
                                   const BatchNormSaved& saved) {
  const char* op = "batch_norm_backward";
  const Layout s = layout_of(op, x);
  check_defined(op, grad, "gradient");
  check_same_shape(op, grad, x);
  check_same_dtype(op, grad, x);
  check_same_device(op, grad, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, saved.mean, "saved mean", false);
  check_channel(op, x, saved.inv_std, "saved inv_std", false);
  BatchNormGrads out;
  out.x = Tensor::empty(x.shape(), x.dtype(), x.device());
  out.gamma = Tensor::empty({s.c}, x.dtype(), x.device());
  out.beta = Tensor::empty({s.c}, x.dtype(), x.device());
  if (s.c == 0) return out;
  // Rows: sum(g), sum(g (x - mean)), a, b, c (double).
  Tensor stats = Tensor::empty({5, s.c}, DType::f64, x.device());
  double* sum_g = mut_ptr<double>(stats);
  double* sum_g_centered = sum_g + s.c;
  double* a = sum_g + 2 * s.c;
  double* b = sum_g + 3 * s.c;
  double* cc = sum_g + 4 * s.c;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* pg = ptr<T>(grad);
    const T* px = ptr<T>(x);
    const T* mean = ptr<T>(saved.mean);
    channel_sums(x.device(), Plain<T>{pg}, sum_g, s.n, s.c, s.inner, int64_t{0});
    channel_sums(x.device(), GradCentered<T>{pg, px, mean}, sum_g_centered, s.n, s.c, s.inner, int64_t{0});
    bn_backward_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        sum_g, sum_g_centered, ptr<T>(saved.inv_std), optional_ptr<const T>(gamma), mut_ptr<T>(out.gamma),
        mut_ptr<T>(out.beta), a, b, cc, s.c, static_cast<double>(s.count()));
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (total == 0) return;
    bn_backward_input_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(pg, px, mean, a, b, cc, mut_ptr<T>(out.x),
                                                                           total, s.c, s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
