// argmax/argmin along an axis, and gather/scatter at the positions they pick (CPU twins).
#include "kernels/axis_select.h"

#include "kernels/axis_layout.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/axis_select_cuda.h"
#endif

namespace tandem::kernels {

using axis_detail::normalize_axis;
using axis_detail::split_at;

namespace axis_select_detail {

void check_index(const char* op, const Shape& shape, int64_t axis, const Tensor& index) {
  check_defined(op, index, "index");
  TANDEM_CHECK(index.dtype() == DType::i64, op << ": the index must be int64, got " << index.str());
  Shape want = shape;
  want[static_cast<size_t>(axis)] = 1;
  TANDEM_CHECK(index.shape() == want, op << ": index " << shape_str(index.shape()) << " for shape "
                                         << shape_str(shape) << " along axis " << axis << " (want "
                                         << shape_str(want) << ")");
}

ArgLayout arg_layout(const char* op, const Tensor& x, int64_t axis, bool keepdim) {
  check_defined(op, x, "input");
  const int64_t a = normalize_axis(op, x.shape(), axis);
  ArgLayout l;
  split_at(x.shape(), a, l.outer, l.size, l.inner);
  TANDEM_CHECK(l.size > 0, op << ": axis " << axis << " of " << x.str() << " is empty");
  l.out_shape = x.shape();
  if (keepdim)
    l.out_shape[static_cast<size_t>(a)] = 1;
  else
    l.out_shape.erase(l.out_shape.begin() + a);
  return l;
}

}  // namespace axis_select_detail

namespace {

// The positions of the extreme element along `axis`: `better(a, b)` says a beats b.
template <typename Better>
Tensor arg_extreme(const char* op, const Tensor& x, int64_t axis, bool keepdim, Better better) {
  const axis_select_detail::ArgLayout l = axis_select_detail::arg_layout(op, x, axis, keepdim);
  require_cpu(op, x);
  const int64_t outer = l.outer, size = l.size, inner = l.inner;
  Tensor out = Tensor::empty(l.out_shape, DType::i64);
  int64_t* po = out.data<int64_t>();
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* row = px + o * size * inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < size; ++k)
          if (better(row[k * inner], row[best * inner])) best = k;
        po[o * inner + i] = best;
      }
  });
  return out;
}

// a beats b: a is NaN and b is not, or a is larger (smaller).
struct Larger {
  template <typename T>
  bool operator()(T a, T b) const {
    return (a != a && b == b) || a > b;
  }
};
struct Smaller {
  template <typename T>
  bool operator()(T a, T b) const {
    return (a != a && b == b) || a < b;
  }
};

void check_index_values(const char* op, const Tensor& index, int64_t size) {
  const int64_t* p = index.data<int64_t>();
  for (int64_t i = 0, n = index.numel(); i < n; ++i)
    TANDEM_CHECK(p[i] >= 0 && p[i] < size, op << ": index " << p[i] << " (at position " << i
                                              << ") is out of range [0, " << size << ")");
}

}  // namespace

Tensor argmax_axis(const Tensor& x, int64_t axis, bool keepdim) {
  TANDEM_CUDA_ROUTE(x, cuda::argmax_axis(x, axis, keepdim));
  return arg_extreme("argmax", x, axis, keepdim, Larger{});
}

Tensor argmin_axis(const Tensor& x, int64_t axis, bool keepdim) {
  TANDEM_CUDA_ROUTE(x, cuda::argmin_axis(x, axis, keepdim));
  return arg_extreme("argmin", x, axis, keepdim, Smaller{});
}

Tensor gather_axis(const Tensor& x, int64_t axis, const Tensor& index) {
  const char* op = "gather_axis";
  check_defined(op, x, "input");
  const int64_t a = normalize_axis(op, x.shape(), axis);
  axis_select_detail::check_index(op, x.shape(), a, index);
  check_same_device(op, x, index);
  TANDEM_CUDA_ROUTE(x, cuda::gather_axis(x, a, index));
  require_cpu(op, x);
  int64_t outer, size, inner;
  split_at(x.shape(), a, outer, size, inner);
  check_index_values(op, index, size);
  Tensor out = Tensor::empty(index.shape(), x.dtype());
  const int64_t* pi = index.data<int64_t>();
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) po[o * inner + i] = px[(o * size + pi[o * inner + i]) * inner + i];
  });
  return out;
}

Tensor scatter_axis(const Tensor& grad, const Shape& shape, int64_t axis, const Tensor& index) {
  const char* op = "scatter_axis";
  check_defined(op, grad, "gradient");
  const int64_t a = normalize_axis(op, shape, axis);
  axis_select_detail::check_index(op, shape, a, index);
  TANDEM_CHECK(grad.shape() == index.shape(), op << ": gradient " << shape_str(grad.shape()) << " and index "
                                                 << shape_str(index.shape()) << " differ");
  check_same_device(op, grad, index);
  TANDEM_CUDA_ROUTE(grad, cuda::scatter_axis(grad, shape, a, index));
  require_cpu(op, grad);
  int64_t outer, size, inner;
  split_at(shape, a, outer, size, inner);
  check_index_values(op, index, size);
  Tensor out = Tensor::zeros(shape, grad.dtype());
  const int64_t* pi = index.data<int64_t>();
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) po[(o * size + pi[o * inner + i]) * inner + i] = pg[o * inner + i];
  });
  return out;
}

}  // namespace tandem::kernels
