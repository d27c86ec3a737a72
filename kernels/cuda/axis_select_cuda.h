// CUDA twins of kernels/axis_select.h. CUDA builds only; the CPU entry points check their
// arguments (axis normalised, index shape) and route here. Each runs on the compute stream
// without waiting and never reads the index on the host.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor argmax_axis(const Tensor& x, int64_t axis, bool keepdim);
Tensor argmin_axis(const Tensor& x, int64_t axis, bool keepdim);
Tensor gather_axis(const Tensor& x, int64_t axis, const Tensor& index);
Tensor scatter_axis(const Tensor& grad, const Shape& shape, int64_t axis, const Tensor& index);

}  // namespace tandem::kernels::cuda
