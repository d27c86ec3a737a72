// Gathering by int64 index tensors: index_select, its scatter-add gradient, and one_hot.
//
// Contract:
// - `index` is an int64 tensor on the operand's device; every value must lie in
//   [0, bound), else an Error names the op, the value and the bound ("index_select: index 7
//   is out of range [0, 5) of dim 0 of x [5, 3]"). Checking a GPU index reads it back to
//   the host (a synchronisation): index tensors are small (a batch of labels).
// - index_select(x, dim, index): index 1-D of length J; the result is x's shape with
//   `dim` of size J, holding x's slices index[0], ..., index[J-1] along dim.
// - index_select_backward(grad, x_shape, dim, index): its gradient for x: zeros of x_shape
//   with grad's slice j added to slice index[j]; a repeated index sums its slices, in the
//   order of j on both devices (bitwise twins, no atomics).
// - one_hot(index, classes, dtype): any index shape; the result has that shape plus a last
//   axis of `classes`, 1 at each index's class and 0 elsewhere, in float32 or float64.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_select_backward(const Tensor& grad, const Shape& x_shape, int64_t dim, const Tensor& index);
Tensor one_hot(const Tensor& index, int64_t classes, DType dtype = DType::f32);

}  // namespace tandem::kernels
