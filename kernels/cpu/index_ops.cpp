// Index ops: the checks for both devices (the index values among them) and the CPU twins.
// Along `dim` a tensor is `outer` blocks of `size` slices of `inner` elements.
#include "kernels/index_ops.h"

#include <algorithm>
#include <string>

#include "kernels/axis_layout.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/index_ops_cuda.h"
#endif

namespace tandem::kernels {

namespace {

void check_index_tensor(const char* op, const Tensor& index) {
  check_defined(op, index, "index");
  TANDEM_CHECK(index.dtype() == DType::i64, op << ": the index must be int64, got " << index.str());
}

// Every value of `index` lies in [0, bound); `what` names the bound in the message.
void check_index_values(const char* op, const Tensor& index, int64_t bound, const std::string& what) {
  const Tensor host = index.device().is_cpu() ? index : index.to(Device::cpu());
  const int64_t* p = host.data<int64_t>();
  for (int64_t i = 0, n = host.numel(); i < n; ++i)
    TANDEM_CHECK(p[i] >= 0 && p[i] < bound, op << ": index " << p[i] << " (at position " << i
                                               << ") is out of range [0, " << bound << ") of " << what);
}

// Checks x (or the gradient of x) and a 1-D index along `dim`; returns the split of
// `x_shape` around the normalised dim.
void index_select_layout(const char* op, const Tensor& x, const Shape& x_shape, int64_t& dim,
                         const Tensor& index, int64_t& outer, int64_t& size, int64_t& inner) {
  check_defined(op, x, "input");
  check_index_tensor(op, index);
  TANDEM_CHECK(index.dim() == 1, op << ": the index must be 1-D, got " << index.str());
  check_same_device(op, x, index);
  require_kernel_device(op, x);
  dim = axis_detail::normalize_axis(op, x_shape, dim);
  axis_detail::split_at(x_shape, dim, outer, size, inner);
  check_index_values(op, index, size, "dim " + std::to_string(dim) + " of x " + shape_str(x_shape));
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const char* op = "index_select";
  int64_t outer, size, inner;
  index_select_layout(op, x, x.shape(), dim, index, outer, size, inner);
  Shape out_shape = x.shape();
  const int64_t count = index.numel();
  out_shape[static_cast<size_t>(dim)] = count;
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  TANDEM_CUDA_ROUTE(x, cuda::index_select(x, index, size, inner, out));
  const int64_t* pi = index.data<int64_t>();
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j)
        std::copy_n(px + (o * size + pi[j]) * inner, inner, po + (o * count + j) * inner);
  });
  return out;
}

Tensor index_select_backward(const Tensor& grad, const Shape& x_shape, int64_t dim, const Tensor& index) {
  const char* op = "index_select_backward";
  int64_t outer, size, inner;
  index_select_layout(op, grad, x_shape, dim, index, outer, size, inner);
  const int64_t count = index.numel();
  Shape grad_shape = x_shape;
  grad_shape[static_cast<size_t>(dim)] = count;
  TANDEM_CHECK(grad.shape() == grad_shape,
               op << ": gradient " << shape_str(grad.shape()) << " for x " << shape_str(x_shape) << " and "
                  << count << " indices along dim " << dim << " (expected " << shape_str(grad_shape) << ")");
  Tensor out = Tensor::zeros(x_shape, grad.dtype(), grad.device());
  TANDEM_CUDA_ROUTE(grad, cuda::index_select_backward(grad, index, size, inner, out));
  const int64_t* pi = index.data<int64_t>();
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < count; ++j) {
        const T* src = pg + (o * count + j) * inner;
        T* dst = po + (o * size + pi[j]) * inner;
        for (int64_t k = 0; k < inner; ++k) dst[k] += src[k];
      }
  });
  return out;
}

Tensor one_hot(const Tensor& index, int64_t classes, DType dtype) {
  const char* op = "one_hot";
  check_index_tensor(op, index);
  TANDEM_CHECK(classes > 0, op << ": classes must be positive, got " << classes);
  TANDEM_CHECK(is_floating(dtype) && dtype_size(dtype) >= 4,
               op << ": the output must be float32 or float64, got " << dtype_name(dtype));
  require_kernel_device(op, index);
  check_index_values(op, index, classes, std::to_string(classes) + " classes");
  Shape out_shape = index.shape();
  out_shape.push_back(classes);
  Tensor out = Tensor::zeros(out_shape, dtype, index.device());
  TANDEM_CUDA_ROUTE(index, cuda::one_hot(index, classes, out));
  const int64_t* pi = index.data<int64_t>();
  dispatch_float(op, dtype, [&]<typename T>() {
    T* po = out.data<T>();
    for (int64_t i = 0, n = index.numel(); i < n; ++i) po[i * classes + pi[i]] = T(1);
  });
  return out;
}

}  // namespace tandem::kernels
