// StyleGAN2's upfirdn2d on NCHW tensors: upsample by zero insertion, pad (or crop), filter
// with a 2-D FIR filter, downsample by keeping every down-th sample. Its adjoint (the
// gradient for x) is again an upfirdn2d, with up and down swapped, the filter flipped and
// the padding of upfirdn2d_adjoint_params; the filter is a constant (no gradient for it).
//
// Contract:
// - upfirdn2d(x, filter, p): x [N, C, H, W]; filter [fh, fw], or [k] used as its outer
//   product (the separable form: weight (i, j) = f[i] f[j]), x's dtype and device.
//   Row y of the upsampled image [H up_y, W up_x] is x's row y / up_y where up_y divides y,
//   0 elsewhere (zeros follow each sample, as StyleGAN's reshape-and-pad does). It is padded
//   by pad_y0 rows above and pad_y1 below (a negative pad crops), likewise in x; then
//   out[oy, ox] = sum_{i, j} padded[oy down_y + i, ox down_x + j] w[i, j], where w is the
//   filter flipped in both axes (a true convolution, StyleGAN's default) or, with
//   flip_filter, the filter as it is (a correlation). Output size per axis:
//   (H up + pad0 + pad1 - fh) / down + 1 (floor). No gain: callers scale the filter.
// - Errors name the op: x not 4-D, a filter not 1-D or 2-D or empty, dtype or device
//   mismatch, up or down < 1, a filter larger than the padded input.
// - The CUDA twin (kernels/cuda/resample.cu) runs the same per-output formula
//   (kernels/resample_math.h), summing in the same order.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

struct UpFirDn2dParams {
  int64_t up_x = 1, up_y = 1;
  int64_t down_x = 1, down_y = 1;
  int64_t pad_x0 = 0, pad_x1 = 0, pad_y0 = 0, pad_y1 = 0;
  bool flip_filter = false;  // false: true convolution (StyleGAN's default); true: correlation
};

Tensor upfirdn2d(const Tensor& x, const Tensor& filter, const UpFirDn2dParams& p);

// The output shape of upfirdn2d (with its argument checks, which name `op`).
Shape upfirdn2d_output_shape(const char* op, const Shape& x, const Shape& filter, const UpFirDn2dParams& p);

// The parameters whose upfirdn2d maps the output gradient (of out_shape) back to x_shape:
// up and down swapped, the filter flipped, pad0' = f - pad0 - 1 and
// pad1' = in up - out down + pad0 - up + 1 per axis (StyleGAN2's upfirdn2d derivation).
UpFirDn2dParams upfirdn2d_adjoint_params(const UpFirDn2dParams& p, const Shape& x_shape,
                                         const Shape& filter_shape, const Shape& out_shape);

}  // namespace tandem::kernels
