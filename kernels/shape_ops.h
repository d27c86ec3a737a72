// Concatenation and slicing along one axis; reordering of axes.
//
// Contract: concat needs equal shapes except along `axis`; slice takes [start, start+length)
// of `axis` as a new contiguous tensor; slice_backward puts grad into a zero tensor of the
// input's shape. permute(x, dims) is a new contiguous tensor whose axis k is x's axis
// dims[k] (dims a permutation of x's axes, negative counting from the end, at most 8 axes).
// Errors name the op and the offending shapes (and dims).
#pragma once

#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor concat(const std::vector<Tensor>& parts, int64_t axis);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t length);
Tensor slice_backward(const Tensor& grad, const Shape& input_shape, int64_t axis, int64_t start);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);

}  // namespace tandem::kernels
