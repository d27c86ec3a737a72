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
    case DType::f32:
      return fn.template operator()<float>();
    case DType::f64:
      return fn.template operator()<double>();
    default:
      break;
  }
  TANDEM_FAIL(op << ": dtype " << dtype_name(dtype) << " is not supported (use float32 or float64)");
}

// Every public kernel starts with TANDEM_CUDA_ROUTE(tensor, cuda::op(args...)): in CUDA
// builds a tensor on a GPU goes to the kernel of kernels/cuda (declared in
// kernels/cuda/<file>_cuda.h); without CUDA the statement is empty and require_cpu below
// names the op.
#if TANDEM_HAVE_CUDA
#define TANDEM_CUDA_ROUTE(tensor, call) \
  if ((tensor).device().is_cuda()) return call
#else
#define TANDEM_CUDA_ROUTE(tensor, call) static_cast<void>(0)
#endif

// CPU kernels call this after routing: a CUDA tensor that reaches them is an error that
// names the op rather than a wild host read of device memory.
inline void require_cpu(const char* op, const Tensor& t) {
  TANDEM_CHECK(t.device().is_cpu(), op << ": no kernel for " << t.str() << " in this build");
}

// For entry points that check and allocate once for both devices before handing the work
// to a device's kernel: the tensor's device has kernels in this build (a CUDA tensor
// without CUDA is an error naming the op, before any allocation on that device).
inline void require_kernel_device(const char* op, const Tensor& t) {
#if !TANDEM_HAVE_CUDA
  require_cpu(op, t);
#else
  static_cast<void>(op);
  static_cast<void>(t);
#endif
}

// The checks of every same-shape binary kernel, on either device: both defined, same
// shape, dtype and device. Errors name the op and the operands.
inline void check_same_operands(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                                const char* b_name) {
  check_defined(op, a, a_name);
  check_defined(op, b, b_name);
  check_same_shape(op, a, b);
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
}

// check_same_operands, on the CPU.
inline void check_same_layout(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                              const char* b_name) {
  check_same_operands(op, a, a_name, b, b_name);
  require_cpu(op, a);
}

}  // namespace tandem::kernels
