// The three convolution kernels of conv_cuda.h: cuDNN where it takes the call, else (and
// for 16-bit operands always) im2col / col2im device kernels around cuBLAS GEMMs, following
// the plan of kernels/cpu/conv.cpp with one launch per chunk of samples where the CPU loops
// over them, and one GEMM per group.
#include <algorithm>
#include <cstdint>

#include "kernels/conv_algorithm.h"
#include "kernels/conv_geometry.h"
#include "kernels/cuda/conv_cuda.h"
#include "kernels/cuda/conv_cudnn.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

using conv_detail::Geometry;

// The GPU can afford a larger shared column buffer than the CPU twin (64 MB in float32).
constexpr int64_t kMaxColumnElements = int64_t{1} << 24;
constexpr int64_t kMaxConvBlocks = int64_t{1} << 20;  // grid-stride covers the rest

// A plain copy of Geometry's fields: its member functions are host-only. c is a sample's
// channel count (its stride), cg the channels of one group that a kernel covers.
struct Geo {
  int64_t c, cg, h, w, kh, kw, ho, wo, stride, padding, dilation;
};

Geo device_geo(const Geometry& g) {
  return {g.c, g.cg(), g.h, g.w, g.kh, g.kw, g.ho, g.wo, g.stride, g.padding, g.dilation};
}

// col [K, count * L] (row (ch, ki, kj), column (sample, oh, ow)) from one group of
// x [count, c, h, w] (x points at the group's first channel, ch < cg); one thread per
// column element, so writes are coalesced along L.
template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x, Geo g, int64_t count, T* __restrict__ col) {
  const int64_t l = g.ho * g.wo, total = g.cg * g.kh * g.kw * count * l;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t pos = idx % l;
    const int64_t rest = idx / l;
    const int64_t i = rest % count, r = rest / count;
    const int64_t kj = r % g.kw, ki = (r / g.kw) % g.kh, ch = r / (g.kw * g.kh);
    const int64_t ih = (pos / g.wo) * g.stride - g.padding + ki * g.dilation;
    const int64_t iw = (pos % g.wo) * g.stride - g.padding + kj * g.dilation;
    const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
    col[idx] = inside ? x[((i * g.c + ch) * g.h + ih) * g.w + iw] : T(0);
  }
}

// One group of dx [count, c, h, w] (dx points at the group's first channel) from col
// [K, count * L]: each input element sums the window entries that read it, in (ki, kj)
// order as the CPU twin adds them, instead of scattering with atomics (whose order, and so
// whose float result, would vary run to run).
template <typename T>
__global__ void col2im_kernel(const T* __restrict__ col, Geo g, int64_t count, T* __restrict__ dx) {
  const int64_t l = g.ho * g.wo, ld = count * l, total = count * g.cg * g.h * g.w;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t iw = idx % g.w, ih = (idx / g.w) % g.h;
    const int64_t ch = (idx / (g.w * g.h)) % g.cg, i = idx / (g.w * g.h * g.cg);
    T sum = T(0);
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t th = ih + g.padding - ki * g.dilation;
      if (th < 0 || th % g.stride != 0 || th / g.stride >= g.ho) continue;
      const int64_t oh = th / g.stride;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tw = iw + g.padding - kj * g.dilation;
        if (tw < 0 || tw % g.stride != 0 || tw / g.stride >= g.wo) continue;
        const int64_t ow = tw / g.stride;
        sum += col[((ch * g.kh + ki) * g.kw + kj) * ld + i * l + oh * g.wo + ow];
      }
    }
    dx[((i * g.c + ch) * g.h + ih) * g.w + iw] = sum;
  }
}

// y [count, rows, l] <-> buf [rows, count * l]; one thread per element of y.
template <typename T, bool kToNchw>
__global__ void permute_rows_kernel(T* __restrict__ buf, int64_t rows, int64_t count, int64_t l,
                                    T* __restrict__ y) {
  const int64_t total = count * rows * l;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t pos = idx % l, r = (idx / l) % rows, i = idx / (l * rows);
    const int64_t b = r * count * l + i * l + pos;
    if constexpr (kToNchw) {
      y[idx] = buf[b];
    } else {
      buf[b] = y[idx];
    }
  }
}

// Group `grp` of samples [n0, n0 + count) of x into cols.
template <typename T>
void im2col(const Tensor& x, int64_t n0, int64_t grp, const Geometry& g, int64_t count, Tensor& cols) {
  const int64_t total = g.k() * count * g.l();
  if (total == 0) return;
  im2col_kernel<T><<<blocks_for(total, kMaxConvBlocks), kThreads, 0, tandem::cuda::compute_stream()>>>(
      ptr<T>(x) + (n0 * g.c + grp * g.cg()) * g.h * g.w, device_geo(g), count, mut_ptr<T>(cols));
  TANDEM_CHECK_LAUNCH();
}

// Group `grp` of samples [n0, n0 + count) of dx from cols.
template <typename T>
void col2im(const Tensor& cols, const Geometry& g, int64_t count, Tensor& dx, int64_t n0, int64_t grp) {
  const int64_t total = count * g.cg() * g.h * g.w;
  if (total == 0) return;
  col2im_kernel<T><<<blocks_for(total, kMaxConvBlocks), kThreads, 0, tandem::cuda::compute_stream()>>>(
      ptr<T>(cols), device_geo(g), count, mut_ptr<T>(dx) + (n0 * g.c + grp * g.cg()) * g.h * g.w);
  TANDEM_CHECK_LAUNCH();
}

// kToNchw: y [n0 + i] <- buf columns of sample i; else the reverse.
template <typename T, bool kToNchw>
void permute_rows(const Tensor& buf, int64_t rows, int64_t count, int64_t l, const Tensor& y,
                  int64_t y_offset) {
  const int64_t total = count * rows * l;
  if (total == 0) return;
  permute_rows_kernel<T, kToNchw>
      <<<blocks_for(total, kMaxConvBlocks), kThreads, 0, tandem::cuda::compute_stream()>>>(
          mut_ptr<T>(buf), rows, count, l, mut_ptr<T>(y) + y_offset);
  TANDEM_CHECK_LAUNCH();
}

// The same three kernels as kernels/cpu/conv.cpp, with each loop over samples of a chunk
// done by one launch. T is the operands' element type and R the result's: the same for
// float32 and float64; for bfloat16 and float16 operands (conv.h's reduced precision) T is
// their 16-bit pattern (im2col and the row permutation only move it) and R is float32, so
// the GEMMs run on the 16-bit operands with a float32 C (gemm_cuda.h: tensor cores, float32
// accumulation) and the result is the contract's float32 sum, as the CPU's is.
template <typename T, typename R>
void forward_impl(const Tensor& x, const Tensor& weight, Tensor& y, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor w2 = weight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, x.dtype(), x.device());
  Tensor out = nb > 1 ? Tensor::empty({g.o, nb * l}, y.dtype(), y.device()) : Tensor();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col<T>(x, n0, grp, g, count, cols);
      Tensor wg = w2.view_range(grp * og * k, {og, k});
      Tensor dst = count == 1 ? y.view_range((n0 * g.o + grp * og) * l, {og, l})
                              : out.view_range(grp * og * count * l, {og, count * l});
      gemm(wg, false, cols, false, dst, 1.0, 0.0);
    }
    if (count > 1) permute_rows<R, true>(out.view_range(0, {g.o, count * l}), g.o, count, l, y, n0 * g.o * l);
  }
}

template <typename T, typename R>
void backward_input_impl(const Tensor& grad, const Tensor& weight, Tensor& dx, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor w2 = weight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, dx.dtype(), dx.device());  // the GEMM's result
  Tensor gbuf = nb > 1 ? Tensor::empty({g.o, nb * l}, grad.dtype(), grad.device()) : Tensor();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor gs;
    if (count == 1) {
      gs = grad.view_range(n0 * g.o * l, {g.o, l});
    } else {
      gs = gbuf.view_range(0, {g.o, count * l});
      permute_rows<T, false>(gs, g.o, count, l, grad, n0 * g.o * l);
    }
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Tensor wg = w2.view_range(grp * og * k, {og, k});
      Tensor gsg = gs.view_range(grp * og * count * l, {og, count * l});
      gemm(wg, true, gsg, false, cols, 1.0, 0.0);
      col2im<R>(cols, g, count, dx, n0, grp);
    }
  }
}

template <typename T, typename R>
void backward_weight_impl(const Tensor& grad, const Tensor& x, Tensor& dweight, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor dw2 = dweight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, x.dtype(), x.device());
  Tensor gbuf = nb > 1 ? Tensor::empty({g.o, nb * l}, grad.dtype(), grad.device()) : Tensor();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor gs;
    if (count == 1) {
      gs = grad.view_range(n0 * g.o * l, {g.o, l});
    } else {
      gs = gbuf.view_range(0, {g.o, count * l});
      permute_rows<T, false>(gs, g.o, count, l, grad, n0 * g.o * l);
    }
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col<T>(x, n0, grp, g, count, cols);
      Tensor gsg = gs.view_range(grp * og * count * l, {og, count * l});
      Tensor dwg = dw2.view_range(grp * og * k, {og, k});
      gemm(gsg, false, cols, true, dwg, 1.0, n0 == 0 ? 0.0 : 1.0);
    }
  }
  if (g.n == 0) dweight.zero_();
}

// Runs impl<T, R> for the operands' dtype: float32 and float64 as themselves, bfloat16 and
// float16 as 16-bit patterns with a float32 result.
template <typename Fn>
void dispatch_operands(const char* op, DType dtype, Fn&& fn) {
  if (is_16bit_float(dtype)) return fn.template operator()<uint16_t, float>();
  dispatch_float(op, dtype, [&]<typename T>() { fn.template operator()<T, T>(); });
}

}  // namespace

// Each entry point tries cuDNN first (conv_cudnn.h), which declines when the mode is off or
// the shape is not for it, and 16-bit operands (its 16-bit configurations write a 16-bit
// result, where conv.h's is float32); im2col + cuBLAS then does the work.
void conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y, const Geometry& g) {
  TANDEM_CHECK_CUDA(cudaSetDevice(x.device().index));
  const bool by_cudnn = cudnn_conv_forward(op, x, weight, y, g);
  count_conv_dispatch(by_cudnn);
  if (by_cudnn) return;
  dispatch_operands(op, x.dtype(), [&]<typename T, typename R>() { forward_impl<T, R>(x, weight, y, g); });
}

void conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                         const Geometry& g) {
  TANDEM_CHECK_CUDA(cudaSetDevice(grad.device().index));
  const bool by_cudnn = cudnn_conv_backward_input(op, grad, weight, dx, g);
  count_conv_dispatch(by_cudnn);
  if (by_cudnn) return;
  dispatch_operands(op, grad.dtype(),
                    [&]<typename T, typename R>() { backward_input_impl<T, R>(grad, weight, dx, g); });
}

void conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                          const Geometry& g) {
  TANDEM_CHECK_CUDA(cudaSetDevice(x.device().index));
  const bool by_cudnn = cudnn_conv_backward_weight(op, grad, x, dweight, g);
  count_conv_dispatch(by_cudnn);
  if (by_cudnn) return;
  dispatch_operands(op, x.dtype(),
                    [&]<typename T, typename R>() { backward_weight_impl<T, R>(grad, x, dweight, g); });
}

}  // namespace tandem::kernels::cuda
