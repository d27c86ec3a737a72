// argmax/argmin along an axis and gather/scatter at their positions, on a GPU: one thread
// per (outer, inner) position, walking the axis in order as the CPU twin does, so the
// picks (first on ties, NaN first) are the same.
#include "kernels/axis_layout.h"
#include "kernels/axis_select.h"
#include "kernels/cuda/axis_select_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

using axis_detail::split_at;

template <typename T, bool kLargest>
__global__ void arg_extreme_kernel(const T* x, int64_t* out, int64_t outer, int64_t size, int64_t inner) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < outer * inner;
       j += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = j / inner, i = j % inner;
    const T* row = x + o * size * inner + i;
    int64_t best = 0;
    for (int64_t k = 1; k < size; ++k) {
      const T a = row[k * inner], b = row[best * inner];
      const bool better = (a != a && b == b) || (kLargest ? a > b : a < b);
      if (better) best = k;
    }
    out[j] = best;
  }
}

template <typename T>
__global__ void gather_kernel(const T* x, const int64_t* index, T* out, int64_t outer, int64_t size,
                              int64_t inner) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < outer * inner;
       j += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = j / inner, i = j % inner;
    out[j] = x[(o * size + index[j]) * inner + i];
  }
}

template <typename T>
__global__ void scatter_kernel(const T* grad, const int64_t* index, T* out, int64_t outer, int64_t size,
                               int64_t inner) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < outer * inner;
       j += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = j / inner, i = j % inner;
    out[(o * size + index[j]) * inner + i] = grad[j];
  }
}

template <bool kLargest>
Tensor arg_extreme(const char* op, const Tensor& x, int64_t axis, bool keepdim) {
  const axis_select_detail::ArgLayout l = axis_select_detail::arg_layout(op, x, axis, keepdim);
  require_cuda(op, x);
  const int64_t outer = l.outer, size = l.size, inner = l.inner;
  Tensor out = Tensor::empty(l.out_shape, DType::i64, x.device());
  const int64_t n = outer * inner;
  if (n == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    arg_extreme_kernel<T, kLargest><<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        ptr<T>(x), mut_ptr<int64_t>(out), outer, size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

Tensor argmax_axis(const Tensor& x, int64_t axis, bool keepdim) {
  return arg_extreme<true>("argmax", x, axis, keepdim);
}
Tensor argmin_axis(const Tensor& x, int64_t axis, bool keepdim) {
  return arg_extreme<false>("argmin", x, axis, keepdim);
}

Tensor gather_axis(const Tensor& x, int64_t axis, const Tensor& index) {
  const char* op = "gather_axis";
  require_cuda(op, x);
  int64_t outer, size, inner;
  split_at(x.shape(), axis, outer, size, inner);
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
  const int64_t n = outer * inner;
  if (n == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    gather_kernel<T><<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        ptr<T>(x), ptr<int64_t>(index), mut_ptr<T>(out), outer, size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor scatter_axis(const Tensor& grad, const Shape& shape, int64_t axis, const Tensor& index) {
  const char* op = "scatter_axis";
  require_cuda(op, grad);
  int64_t outer, size, inner;
  split_at(shape, axis, outer, size, inner);
  Tensor out = Tensor::zeros(shape, grad.dtype(), grad.device());
  const int64_t n = outer * inner;
  if (n == 0) return out;
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    scatter_kernel<T><<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        ptr<T>(grad), ptr<int64_t>(index), mut_ptr<T>(out), outer, size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
