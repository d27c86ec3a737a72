// CUDA twins of kernels/shape_ops.h. CUDA builds only.
//
// Contract: same signatures, shapes and errors as the CPU kernels; every part of a
// concat must be on the same GPU. Runs on the compute stream without waiting.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor concat(const std::vector<Tensor>& parts, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t length);
Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t axis, int64_t start);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace tandem::kernels::cuda
