// Internal to the batch-norm kernels (kernels/cpu/norm.cpp and kernels/cuda): the layout of
// the input and the per-channel operand checks both devices share, so the CPU and CUDA
// paths reject the same inputs with the same messages. The device itself is the caller's
// business.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::norm_detail {

// x viewed as [n, c, inner]: element (i, ch, j) is at (i * c + ch) * inner + j.
struct Layout {
  int64_t n, c, inner;
  int64_t count() const { return n * inner; }  // elements per channel
};

inline Layout layout_of(const char* op, const Tensor& x) {
  check_defined(op, x, "input");
  TANDEM_CHECK(x.dim() >= 2 && x.dim() <= 4,
               op << ": needs [N, C], [N, C, L] or [N, C, H, W], got " << shape_str(x.shape()));
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
  return Layout{x.size(0), x.size(1), inner};
}

// Every operand but x (the gradient, gamma, beta, the statistics) is in x's accumulate
// dtype (runtime/dtype.h): float32 for a bfloat16 x (a rounded operand, autograd/precision.h),
// x's own dtype otherwise.
inline void check_compute_dtype(const char* op, const Tensor& x, const Tensor& t, const char* what) {
  const DType want = accumulate_dtype(x.dtype());
  TANDEM_CHECK(t.dtype() == want, op << ": " << what << " is " << dtype_name(t.dtype()) << " but an input of "
                                     << dtype_name(x.dtype()) << " needs " << dtype_name(want));
}

// A per-channel tensor (gamma, beta, running stats) must be [C] of x's accumulate dtype and
// x's device; gamma and beta may be undefined (scale 1, shift 0).
inline void check_channel(const char* op, const Tensor& x, const Tensor& t, const char* what, bool optional) {
  if (optional && !t.defined()) return;
  check_defined(op, t, what);
  TANDEM_CHECK(t.dim() == 1 && t.size(0) == x.size(1), op << ": " << what << " " << shape_str(t.shape())
                                                          << " does not match channels (axis 1) of input "
                                                          << shape_str(x.shape()));
  check_compute_dtype(op, x, t, what);
  check_same_device(op, x, t);
}

}  // namespace tandem::kernels::norm_detail
