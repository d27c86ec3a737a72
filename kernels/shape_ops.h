// Concatenation and slicing along one axis.
//
// Contract: concat needs equal shapes except along `axis`; slice takes [start, start+length)
// of `axis` as a new contiguous tensor; slice_backward puts grad into a zero tensor of the
// input's shape. Errors name the op and the offending shapes.
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor concat(const std::vector<Tensor>& parts, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t length);
Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t axis, int64_t start);

}  // namespace tandem::kernels
