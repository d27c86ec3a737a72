// CUDA twins of kernels/pool.h. CUDA builds only.
//
// Contract: same signatures, shapes and errors as the CPU kernels; runs on the compute
// stream without waiting.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor upsample_nearest2x(const Tensor& x);
Tensor upsample_nearest2x_backward(const Tensor& grad);
Tensor avg_pool2x(const Tensor& x);
Tensor avg_pool2x_backward(const Tensor& grad);

}  // namespace tandem::kernels::cuda
