// CUDA twins of kernels/loss.h. CUDA builds only.
//
// Contract: same signatures, stable formulas and errors as the CPU kernels; runs on the
// compute stream without waiting.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets);
Tensor bce_with_logits_backward(const Tensor& grad, const Tensor& logits, const Tensor& targets);

}  // namespace tandem::kernels::cuda
