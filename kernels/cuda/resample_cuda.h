// CUDA twins of kernels/resample.h. CUDA builds only; the CPU entry points check the
// arguments and route here with the checked geometry.
#pragma once

#include "kernels/resample_math.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor upfirdn2d(const Tensor& x, const Tensor& filter, const resample_math::UpFirDn2dGeometry& g);

}  // namespace tandem::kernels::cuda
