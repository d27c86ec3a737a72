// CUDA twins of kernels/reduce.h. CUDA builds only.
//
// Contract: same signatures, shapes and errors as the CPU kernels. Sums accumulate in
// double in a fixed order that depends only on the shape, so results are deterministic;
// they run on the compute stream without waiting.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor sum_all(const Tensor& x);
Tensor mean_all(const Tensor& x);
Tensor sum_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor mean_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor expand_axis(const Tensor& grad, const Shape& shape, int64_t axis);
Tensor expand_scalar(const Tensor& value, const Shape& shape);

}  // namespace tandem::kernels::cuda
