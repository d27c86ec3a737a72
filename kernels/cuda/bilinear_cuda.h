// CUDA twins of kernels/bilinear.h. CUDA builds only; the CPU entry points check the
// arguments and route here.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor interpolate_bilinear(const Tensor& x, int64_t out_h, int64_t out_w);
Tensor interpolate_bilinear_adjoint(const Tensor& grad, int64_t in_h, int64_t in_w);

}  // namespace tandem::kernels::cuda
