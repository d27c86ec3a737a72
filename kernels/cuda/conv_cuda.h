// Convolution on CUDA tensors: im2col / col2im kernels + cuBLAS GEMM. CUDA builds only;
// kernels/conv.h routes here.
//
// Contract: as kernels/conv.h (same checks and messages, same results up to the GEMM's
// summation order). col2im gathers each input element's window contributions in a fixed
// order (no atomics), so results are deterministic run to run. Runs on the compute stream.
#pragma once

#include "kernels/conv.h"

namespace tandem::kernels::cuda {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dParams& p);
Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p);
Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p);
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Conv2dParams& p);
Tensor conv_transpose2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& x_shape,
                                       const Conv2dParams& p);
Tensor conv_transpose2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                                        const Conv2dParams& p);

}  // namespace tandem::kernels::cuda
