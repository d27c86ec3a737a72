// float32 CPU GEMMs through oneDNN's matmul, for the shapes where it beats Eigen's GEMM, and
// the bfloat16 GEMMs of reduced precision (kernels/gemm.h).
//
// Contract:
// - onednn_gemm(a, ta, b, tb, c, alpha, beta) computes C = op(A) op(B) through oneDNN and
//   returns true, or returns false (and touches nothing) when the call is Eigen's: the CPU
//   convolution backend is not onednn (conv_onednn.h: TANDEM_CONV_BACKEND and
//   set_cpu_conv_backend choose both), the operands are neither float32 nor bfloat16 (with a
//   float32 C), bfloat16 would run on oneDNN's reference code (a CPU without native
//   bfloat16, AVX512_BF16 or AMX: onednn_bf16_native), alpha is not 1 or beta not
//   0, or the output is a vector (m or n is 1: a matrix-vector product, where oneDNN was 0.2-0.7x
//   Eigen's time on the GAN models' Linear shapes, against 1.2-1.55x on the others;
//   bench/conv_bench --only linear).
// - Operands are the row-major 2-D tensors kernels::gemm takes (shapes already checked); a
//   transposed operand is read through strides, never copied. Primitives are made once per
//   (m, n, k, ta, tb, threads) and reused; the call runs on cpu_conv_threads() threads.
// - Deterministic: the same shapes and thread count give bitwise the same result, call to
//   call and process to process, so ranks stay bitwise replicas.
// - oneDNN errors become an Error naming the GEMM's shape.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cpu {

bool onednn_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta);

}  // namespace tandem::kernels::cpu
