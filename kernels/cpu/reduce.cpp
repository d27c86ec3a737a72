// Reductions. Sums accumulate in double for float32 inputs so long reductions (a loss over
// a batch) do not drift with the element count.
#include "kernels/reduce.h"

#include "kernels/axis_layout.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/reduce_cuda.h"
#endif

namespace tandem::kernels {

using axis_detail::normalize_axis;
using axis_detail::split_at;

Tensor sum_all(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::sum_all(x));
  check_defined("sum", x, "input");
  require_cpu("sum", x);
  Tensor out = Tensor::empty({}, x.dtype(), x.device());
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    double s = 0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i) s += p[i];
    out.data<T>()[0] = static_cast<T>(s);
  });
  return out;
}

Tensor mean_all(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::mean_all(x));
  TANDEM_CHECK(x.numel() > 0, "mean of an empty tensor " << x.str());
  Tensor s = sum_all(x);
  dispatch_float("mean", x.dtype(), [&]<typename T>() { s.data<T>()[0] /= static_cast<T>(x.numel()); });
  return s;
}

Tensor sum_axis(const Tensor& x, int64_t axis, bool keepdim) {
  TANDEM_CUDA_ROUTE(x, cuda::sum_axis(x, axis, keepdim));
  check_defined("sum", x, "input");
  require_cpu("sum", x);
  int64_t a = normalize_axis("sum", x.shape(), axis);
  int64_t outer, size, inner;
  split_at(x.shape(), a, outer, size, inner);
  Shape shape = x.shape();
  if (keepdim)
    shape[static_cast<size_t>(a)] = 1;
  else
    shape.erase(shape.begin() + a);
  Tensor out = Tensor::zeros(shape, x.dtype(), x.device());
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    const T* p = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < outer; ++i)
      for (int64_t k = 0; k < size; ++k) {
        const T* row = p + (i * size + k) * inner;
        T* dst = o + i * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] += row[j];
      }
  });
  return out;
}

Tensor mean_axis(const Tensor& x, int64_t axis, bool keepdim) {
  TANDEM_CUDA_ROUTE(x, cuda::mean_axis(x, axis, keepdim));
  int64_t n = x.size(axis);
  TANDEM_CHECK(n > 0, "mean over an empty axis of " << x.str());
  Tensor s = sum_axis(x, axis, keepdim);
  dispatch_float("mean", x.dtype(), [&]<typename T>() {
    T* p = s.data<T>();
    for (int64_t i = 0; i < s.numel(); ++i) p[i] /= static_cast<T>(n);
  });
  return s;
}

Tensor expand_axis(const Tensor& grad, const Shape& shape, int64_t axis) {
  TANDEM_CUDA_ROUTE(grad, cuda::expand_axis(grad, shape, axis));
  check_defined("expand_axis", grad, "gradient");
  require_cpu("expand_axis", grad);
  int64_t d = static_cast<int64_t>(shape.size());
  int64_t a = axis < 0 ? axis + d : axis;
  TANDEM_CHECK(a >= 0 && a < d, "expand_axis: axis " << axis << " out of range for " << shape_str(shape));
  int64_t outer, size, inner;
  split_at(shape, a, outer, size, inner);
  TANDEM_CHECK(grad.numel() == outer * inner, "expand_axis: gradient " << shape_str(grad.shape())
                                                                       << " does not fit " << shape_str(shape)
                                                                       << " reduced over axis " << axis);
  Tensor out = Tensor::empty(shape, grad.dtype(), grad.device());
  dispatch_float("expand_axis", grad.dtype(), [&]<typename T>() {
    const T* g = grad.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < outer; ++i)
      for (int64_t k = 0; k < size; ++k) {
        T* dst = o + (i * size + k) * inner;
        const T* src = g + i * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
      }
  });
  return out;
}

Tensor expand_scalar(const Tensor& value, const Shape& shape) {
  TANDEM_CUDA_ROUTE(value, cuda::expand_scalar(value, shape));
  TANDEM_CHECK(value.numel() == 1, "expand_scalar: needs one value, got " << value.str());
  // Read through data(), not item(): this read is the kernel's, not a host read of a result
  // (its CUDA twin reads on the device; runtime/host_cost.h counts item()).
  return Tensor::full(shape, value.to(DType::f64).data<double>()[0], value.dtype(), value.device());
}

}  // namespace tandem::kernels
