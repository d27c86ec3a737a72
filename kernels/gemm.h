// Matrix products.
//
// Contract: 2-D float32/float64 tensors on one device (CPU, or CUDA through cuBLAS with
// float32 accumulation and no TF32). op(X) is X or its transpose.
// Reduced precision: A and B may both be bfloat16 or both float16; C is then float32
//   (accumulate_dtype) and the product is that of the exact float32 values of the operands,
//   accumulated in float32: on CUDA through cuBLAS's GemmEx on the 16-bit operands (tensor
//   cores, float32 compute and C); on the CPU through oneDNN's bfloat16 matmul where it runs
//   natively (cpu/gemm_onednn.h), otherwise the float32 kernel on the widened operands (the
//   same sums up to their order).
// gemm: C = alpha * op(A) op(B) + beta * C (C preallocated, shape checked; with beta = 0
//   C's old contents are never read, so NaN there does not leak).
// matmul: returns op(A) op(B). Shape errors name the op and both operand shapes.
// Every gemm call (on any device) is seen by the kernel recorder (kernel_recorder.h).
// check_gemm: the checks gemm makes on its operands (device-agnostic), returning
//   {m, k, n}; shared by the CPU and CUDA kernels.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha = 1.0,
          double beta = 0.0);
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

struct GemmShape {
  int64_t m, k, n;
};
GemmShape check_gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, const Tensor& c);

}  // namespace tandem::kernels
