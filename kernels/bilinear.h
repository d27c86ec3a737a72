// Bilinear resizing of NCHW tensors with PyTorch's align_corners=False semantics
// (F.interpolate(mode='bilinear', align_corners=False), no antialias), and its adjoint.
//
// Contract:
// - interpolate_bilinear(x, out_h, out_w): x [N, C, H, W] -> [N, C, out_h, out_w]. Per axis
//   the output index d reads the source s = max((d + 0.5) in / out - 0.5, 0) (in / out in
//   x's dtype), i0 = floor(s), i1 = min(i0 + 1, in - 1), weights 1 - (s - i0) and s - i0;
//   out = h0 (w0 x[i0, j0] + w1 x[i0, j1]) + h1 (w0 x[i1, j0] + w1 x[i1, j1]).
// - interpolate_bilinear_adjoint(grad, in_h, in_w): grad [N, C, out_h, out_w] ->
//   [N, C, in_h, in_w], the transpose of that linear map (interpolate_bilinear's gradient
//   for x). It gathers: each input sums the outputs that read it, in increasing order, so
//   it needs no atomics and the CUDA twin sums in the CPU's order.
// - Sizes must be >= 1; x (grad) must be 4-D. Errors name the op and the shapes.
// - The formulas are shared with the CUDA twin (kernels/bilinear_math.h).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor interpolate_bilinear(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor interpolate_bilinear_adjoint(const Tensor& grad, int64_t in_h, int64_t in_w);

}  // namespace tandem::kernels
