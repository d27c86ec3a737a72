// 2-D convolution and transposed convolution (NCHW), by im2col + GEMM.
//
// Contract:
// conv2d: x [N, C, H, W], weight [O, C / groups, kh, kw] -> [N, O, Ho, Wo] with
//   Ho = (H + 2p - d (kh - 1) - 1) / s + 1 (d the dilation). No bias here (add_bias does that).
// conv_transpose2d: x [N, C, H, W], weight [C, O / groups, kh, kw] -> [N, O, Ho, Wo] with
//   Ho = (H - 1) s - 2p + d (kh - 1) + 1 + output_padding (output_padding < max(s, d)).
//   It is the adjoint of conv2d.
// With groups g (PyTorch's semantics), C and O split into g consecutive blocks and output
// block j sees input block j only; C and O must divide by g.
// Each has backward_input and backward_weight. Shape errors name the op and both shapes.
// Reduced precision: the two operands may both be bfloat16 or both float16; the result is
// then float32 (accumulate_dtype), the convolution of the operands' exact float32 values
// accumulated in float32: on a GPU, im2col + cuBLAS's 16-bit GEMMs (cuda/conv_cuda.h); on
// the CPU, oneDNN's bfloat16 kernels where they run natively (cpu/conv_onednn.h), otherwise
// the float32 kernels on the widened operands.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

struct Conv2dParams {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;  // conv_transpose2d only
  int64_t dilation = 1;        // spacing between kernel taps
  int64_t groups = 1;          // channels split into this many independent convolutions
};

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

}  // namespace tandem::kernels
