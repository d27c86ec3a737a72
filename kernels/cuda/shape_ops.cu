// Concat, slice and permute. Along `axis` a contiguous tensor is `outer` blocks of `size * inner`
// elements, so each op is one strided block copy per part.
#include <vector>

#include "kernels/axis_layout.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/shape_ops_cuda.h"
#include "kernels/dispatch.h"
#include "kernels/permute_layout.h"

namespace tandem::kernels::cuda {

using axis_detail::normalize_axis;
using axis_detail::split_at;

namespace {

// Copies `outer` blocks of `count` elements from src (stride src_stride) to dst (stride
// dst_stride).
template <typename T>
__global__ void copy_blocks_kernel(const T* src, int64_t src_stride, T* dst, int64_t dst_stride,
                                   int64_t outer, int64_t count) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < outer * count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t o = idx / count, r = idx % count;
    dst[o * dst_stride + r] = src[o * src_stride + r];
  }
}

template <typename T>
void copy_blocks(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t outer, int64_t count) {
  if (outer * count == 0) return;
  copy_blocks_kernel<<<blocks_for(outer * count), kThreads, 0, stream()>>>(src, src_stride, dst, dst_stride,
                                                                           outer, count);
  TANDEM_CHECK_LAUNCH();
}

// One thread per output element: it reads the input element permute_source names.
template <typename T>
__global__ void permute_kernel(const T* x, T* out, permute_detail::PermuteLayout l, int64_t n) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < n;
       idx += int64_t(blockDim.x) * gridDim.x)
    out[idx] = x[permute_detail::permute_source(l, idx)];
}

}  // namespace

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
    copy_blocks(ptr<T>(x) + start * inner, size * inner, mut_ptr<T>(out), length * inner, outer,
                length * inner);
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
  for (int64_t i = 0; match && i < grad.dim(); ++i)
    match = i == a || grad.size(i) == input_shape[static_cast<size_t>(i)];
  TANDEM_CHECK(match && start >= 0 && start + grad.size(a) <= size,
               op << ": gradient " << shape_str(grad.shape()) << " at offset " << start << " of axis " << axis
                  << " does not fit input " << shape_str(input_shape));
  const int64_t length = grad.size(a);
  Tensor out = Tensor::zeros(input_shape, grad.dtype(), grad.device());
  int64_t outer, unused, inner;
  split_at(input_shape, a, outer, unused, inner);
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    copy_blocks(ptr<T>(grad), length * inner, mut_ptr<T>(out) + start * inner, size * inner, outer,
                length * inner);
  });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const char* op = "permute";
  check_defined(op, x, "input");
  require_cuda(op, x);
  const permute_detail::PermuteLayout l = permute_detail::permute_layout(op, x.shape(), dims);
  Tensor out = Tensor::empty(permute_detail::permuted_shape(l), x.dtype(), x.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    permute_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(x), mut_ptr<T>(out), l, n);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
