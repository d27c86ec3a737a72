// The three convolution kernels on CUDA tensors: cuDNN (conv_cudnn.h) unless the mode
// (kernels/conv_algorithm.h) is off or cuDNN declines the shape, else im2col / col2im
// kernels + cuBLAS GEMM. bfloat16 and float16 operand pairs (conv.h's reduced precision)
// always take im2col + cuBLAS: its GEMMs run on the 16-bit operands with a float32 result
// (tensor cores, float32 accumulation), where cuDNN's 16-bit configurations would write a
// 16-bit one. CUDA builds only; the entry points of kernels/conv.h check the
// operands, work out the Geometry, allocate the output and call these for tensors on a GPU.
//
// Contract: the same results as the CPU twins in kernels/cpu/conv.cpp up to the summation
// order. Both paths are deterministic run to run: col2im gathers each input element's
// window contributions in a fixed order (no atomics), and cuDNN is limited to its
// deterministic algorithms. Runs on the compute stream. Each call counts in
// conv_dispatch_counts() under the path that ran it.
// `op` names the caller in errors (an unsupported dtype).
#pragma once

#include "kernels/conv_geometry.h"

namespace tandem::kernels::cuda {

// y [n, o, ho, wo] = conv2d(x [n, c, h, w], weight [o, c, kh, kw]).
void conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y,
                  const conv_detail::Geometry& g);
// dx [n, c, h, w] = the adjoint of conv_forward applied to grad [n, o, ho, wo].
void conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                         const conv_detail::Geometry& g);
// dweight [o, c, kh, kw] = sum over samples of grad x im2col(x)^T.
void conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                          const conv_detail::Geometry& g);

}  // namespace tandem::kernels::cuda
