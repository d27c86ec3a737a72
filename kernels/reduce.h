// Reductions.
//
// Contract: sum_all/mean_all return a 0-d tensor. sum_axis/mean_axis reduce one axis
// (negative counts from the end), keeping it as size 1 when keepdim. expand_axis is the
// backward of a reduction: it repeats `grad` (whose `axis` has size 1 or was removed) to
// `shape`.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor sum_all(const Tensor& x);
Tensor mean_all(const Tensor& x);
Tensor sum_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor mean_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor expand_axis(const Tensor& grad, const Shape& shape, int64_t axis);
// A tensor of `shape` filled with the single value of the 0-d or 1-element tensor `value`.
Tensor expand_scalar(const Tensor& value, const Shape& shape);

}  // namespace tandem::kernels
