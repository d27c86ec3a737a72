// Reductions. Every sum runs on the kernels of sums.cuh (double accumulation, no atomics,
// so results are deterministic); expand_axis and expand_scalar are their adjoints.
#include <cstdint>
#include <type_traits>

#include "kernels/axis_layout.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/cuda/sums.cuh"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

using axis_detail::normalize_axis;
using axis_detail::split_at;

namespace {

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
  if (keepdim)
    shape[static_cast<size_t>(a)] = 1;
  else
    shape.erase(shape.begin() + a);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  set_device(x);
  dispatch_float("sum", x.dtype(), [&]<typename T>() {
    if (inner == 1)
      row_sums(x.device(), Plain<T>{ptr<T>(x)}, mut_ptr<T>(out), outer, size, divisor);
    else
      column_sums(x.device(), Plain<T>{ptr<T>(x)}, mut_ptr<T>(out), outer, size, inner, divisor);
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
    expand_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(grad), mut_ptr<T>(out), count, size,
                                                                inner);
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
    broadcast_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<Bits>(value), mut_ptr<Bits>(out),
                                                                   count);
    TANDEM_CHECK_LAUNCH();
  };
  switch (dtype_size(value.dtype())) {
    case 2:
      launch(static_cast<uint16_t*>(nullptr));
      break;
    case 4:
      launch(static_cast<uint32_t*>(nullptr));
      break;
    case 8:
      launch(static_cast<uint64_t*>(nullptr));
      break;
    default:
      TANDEM_FAIL("expand_scalar: dtype " << dtype_name(value.dtype()) << " is not supported");
  }
  return out;
}

}  // namespace tandem::kernels::cuda
