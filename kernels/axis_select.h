// Selecting along one axis: the position of the largest (or smallest) element, and moving
// values to and from such positions. max/min along an axis (autograd/ops.h) are built from
// these: argmax picks, gather_axis reads the values, scatter_axis is its gradient.
//
// Contract:
// - argmax_axis / argmin_axis(x, axis, keepdim): int64 positions along `axis` (negative
//   counts from the end) of x's largest / smallest element, the first one on ties; a NaN
//   counts as larger (and smaller) than every number, so the first NaN is picked, as
//   PyTorch's max does. x's shape with the axis of size 1 (keepdim) or removed; the axis
//   must not be empty. float32 / float64.
// - gather_axis(x, axis, index): index has x's shape with `axis` of size 1 (argmax_axis's
//   keepdim result); out[.., 0, ..] = x[.., index[.., 0, ..], ..], in index's shape.
// - scatter_axis(grad, shape, axis, index): zeros of `shape` with grad (index's shape) at
//   the positions index names: gather_axis's adjoint.
// - Index values must lie in [0, size of the axis): checked on the CPU (an Error naming the
//   op and the value); on a GPU the indices are argmax_axis's own and are not read back.
// - Every kernel has its CUDA twin (kernels/cuda/axis_select.cu), bitwise the CPU result.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor argmax_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmin_axis(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor gather_axis(const Tensor& x, int64_t axis, const Tensor& index);
Tensor scatter_axis(const Tensor& grad, const Shape& shape, int64_t axis, const Tensor& index);

// What both devices share: the index checks (int64, `shape` with the normalised axis of
// size 1), and argmax/argmin's checks and result layout.
namespace axis_select_detail {
void check_index(const char* op, const Shape& shape, int64_t axis, const Tensor& index);
struct ArgLayout {
  Shape out_shape;  // x's shape with the axis of size 1 (keepdim) or removed
  int64_t outer = 1, size = 1, inner = 1;
};
ArgLayout arg_layout(const char* op, const Tensor& x, int64_t axis, bool keepdim);
}  // namespace axis_select_detail

}  // namespace tandem::kernels
