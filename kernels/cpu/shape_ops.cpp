// Concat, slice and permute. Every tensor is contiguous and row-major, so along `axis` a tensor is
// `outer` blocks of `size * inner` elements and each op is a loop of block copies.
#include "kernels/shape_ops.h"

#include <algorithm>

#include "kernels/axis_layout.h"
#include "kernels/dispatch.h"
#include "kernels/permute_layout.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/shape_ops_cuda.h"
#endif

namespace tandem::kernels {

using axis_detail::normalize_axis;
using axis_detail::split_at;

namespace {

// Copies `outer` blocks of `count` elements from src (stride src_stride) to dst (stride
// dst_stride).
template <typename T>
void copy_blocks(const T* src, int64_t src_stride, T* dst, int64_t dst_stride, int64_t outer, int64_t count) {
  for (int64_t o = 0; o < outer; ++o) std::copy_n(src + o * src_stride, count, dst + o * dst_stride);
}

}  // namespace

Tensor concat(const std::vector<Tensor>& parts, int64_t axis) {
  const char* op = "concat";
  TANDEM_CHECK(!parts.empty(), op << ": no tensors given");
  TANDEM_CUDA_ROUTE(parts.front(), cuda::concat(parts, axis));
  int64_t a = 0;
  Shape out_shape = axis_detail::concat_shape(op, parts, axis, a);
  const Tensor& first = parts.front();
  require_cpu(op, first);
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t outer, size, inner;
  split_at(out_shape, a, outer, size, inner);
  int64_t out_stride = size * inner;
  dispatch_float(op, first.dtype(), [&]<typename T>() {
    T* po = out.data<T>();
    int64_t at = 0;
    for (const Tensor& p : parts) {
      int64_t block = p.size(a) * inner;
      copy_blocks(p.data<T>(), block, po + at, out_stride, outer, block);
      at += block;
    }
  });
  return out;
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t length) {
  TANDEM_CUDA_ROUTE(x, cuda::slice(x, axis, start, length));
  const char* op = "slice";
  check_defined(op, x, "input");
  require_cpu(op, x);
  int64_t a = normalize_axis(op, x.shape(), axis);
  int64_t size = x.size(a);
  TANDEM_CHECK(start >= 0 && length >= 0 && start + length <= size,
               op << ": range [" << start << ", " << start + length << ") out of bounds of axis " << axis
                  << " of shape " << shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[static_cast<size_t>(a)] = length;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  int64_t outer, unused, inner;
  split_at(x.shape(), a, outer, unused, inner);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    copy_blocks(x.data<T>() + start * inner, size * inner, out.data<T>(), length * inner, outer,
                length * inner);
  });
  return out;
}

Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t axis, int64_t start) {
  TANDEM_CUDA_ROUTE(grad, cuda::slice_backward(grad, input_shape, axis, start));
  const char* op = "slice_backward";
  check_defined(op, grad, "gradient");
  require_cpu(op, grad);
  int64_t a = normalize_axis(op, input_shape, axis);
  int64_t size = input_shape[static_cast<size_t>(a)];
  bool match = grad.dim() == static_cast<int64_t>(input_shape.size());
  for (int64_t i = 0; match && i < grad.dim(); ++i)
    match = i == a || grad.size(i) == input_shape[static_cast<size_t>(i)];
  TANDEM_CHECK(match && start >= 0 && start + grad.size(a) <= size,
               op << ": gradient " << shape_str(grad.shape()) << " at offset " << start << " of axis " << axis
                  << " does not fit input " << shape_str(input_shape));
  int64_t length = grad.size(a);
  Tensor out = Tensor::zeros(input_shape, grad.dtype(), grad.device());
  int64_t outer, unused, inner;
  split_at(input_shape, a, outer, unused, inner);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    copy_blocks(grad.data<T>(), length * inner, out.data<T>() + start * inner, size * inner, outer,
                length * inner);
  });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  TANDEM_CUDA_ROUTE(x, cuda::permute(x, dims));
  const char* op = "permute";
  check_defined(op, x, "input");
  require_cpu(op, x);
  const permute_detail::PermuteLayout l = permute_detail::permute_layout(op, x.shape(), dims);
  Tensor out = Tensor::empty(permute_detail::permuted_shape(l), x.dtype(), x.device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = px[permute_detail::permute_source(l, i)];
  });
  return out;
}

}  // namespace tandem::kernels
