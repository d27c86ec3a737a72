// Resampling by a factor of 2 on NCHW tensors (the progressive GAN's up and down steps).
//
// Contract: upsample_nearest2x [N, C, H, W] -> [N, C, 2H, 2W] (each pixel repeated 2x2);
// avg_pool2x [N, C, H, W] -> [N, C, H/2, W/2] (H and W even; mean of each 2x2 block).
// Each backward returns the gradient for the input.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor upsample_nearest2x(const Tensor& x);
Tensor upsample_nearest2x_backward(const Tensor& grad);
Tensor avg_pool2x(const Tensor& x);
Tensor avg_pool2x_backward(const Tensor& grad);

}  // namespace tandem::kernels
