// Matrix products.
//
// Contract: 2-D float32/float64 tensors on one device. op(X) is X or its transpose.
// gemm: C = alpha * op(A) op(B) + beta * C (C preallocated, shape checked).
// matmul: returns op(A) op(B). Shape errors name the op and both operand shapes.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0);
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);

}  // namespace tandem::kernels
