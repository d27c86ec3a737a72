// Non-finite scrubbing on CUDA tensors (kernels/cuda/non_finite.cu). CUDA builds only.
//
// Contract: as kernels/non_finite.h, whose function checks the operand and routes here.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

int64_t scrub_non_finite_(Tensor& t, double limit);

}  // namespace tandem::kernels::cuda
