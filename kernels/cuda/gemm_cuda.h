// GEMM on CUDA tensors through cuBLAS. CUDA builds only; kernels/gemm.h routes here.
//
// Contract: as kernels::gemm (same checks and messages). float32 uses CUBLAS_COMPUTE_32F
// with the default math mode (no TF32), float64 cublasDgemm, bfloat16 and float16 pairs
// GemmEx on the 16-bit operands with CUBLAS_COMPUTE_32F and a float32 C. Runs on the compute stream
// and returns without waiting.
// cublas_handle(device): the one cuBLAS handle of that device, created on first use and
// bound to the calling thread's compute stream (rebound when that changes, as in a CUDA
// graph capture) with a 32 MiB workspace of its own, so that cuBLAS never allocates while a
// step is captured; it stays alive until the process exits.
#pragma once

#include <cublas_v2.h>

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

void gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c, double alpha,
          double beta);

cublasHandle_t cublas_handle(int device);

}  // namespace tandem::kernels::cuda
