// Losses.
//
// Contract: bce_with_logits is elementwise: max(x, 0) - x * t + log(1 + exp(-|x|)), the
// numerically stable form; its backward is grad * (sigmoid(x) - t) for x (and
// grad * -x for t). Reduction (mean) is left to the caller.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets);
Tensor bce_with_logits_backward(const Tensor& grad, const Tensor& logits, const Tensor& targets);

}  // namespace tandem::kernels
