// Helpers every kernel file uses: dtype dispatch to a template, and the device check that
// routes CUDA tensors to kernels/cuda when it is built.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

// Calls fn.template operator()<T>() with T = float or double; other dtypes are an error
// naming the op.
template <typename Fn>
decltype(auto) dispatch_float(const char* op, DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn.template operator()<float>();
    case DType::f64: return fn.template operator()<double>();
    default: break;
  }
  TANDEM_FAIL(op << ": dtype " << dtype_name(dtype) << " is not supported (use float32 or float64)");
}

// CPU kernels call this first: until the CUDA twins exist, a CUDA tensor is an error that
// names the op rather than a wild host read of device memory.
inline void require_cpu(const char* op, const Tensor& t) {
  TANDEM_CHECK(t.device().is_cpu(), op << ": no kernel for " << t.str() << " in this build");
}

}  // namespace tandem::kernels
