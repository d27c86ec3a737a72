// NumPy broadcasting for the binary elementwise ops, and the reduction of its gradients.
//
// Contract:
// - Shapes are aligned at their last axis; two sizes agree when they are equal or one of
//   them is 1 (a missing leading axis counts as 1). broadcast_shape returns the common
//   shape or throws an Error naming the op and both shapes ("add: shapes [8, 4] and [3] do
//   not broadcast"); at most kMaxBroadcastDims axes.
// - kernels::add / sub / mul / div (elementwise.h) call broadcast_binary only when their
//   operands' shapes differ: equal shapes keep the same-shape kernels, with no copy.
// - reduce_to_shape(grad, shape) sums grad over the axes along which `shape` was broadcast
//   to grad's shape: the gradient of a broadcast operand. Equal shapes return grad itself.
//   broadcast_to(x, shape) repeats x to `shape` (reduce_to_shape's adjoint).
// - float32 / float64, operands on one device. Every sum runs in the row-major order of
//   the summed axes, on the CPU and on a GPU alike, so the two are bitwise twins.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

enum class BinaryOp : uint8_t { add, sub, mul, div };
const char* binary_op_name(BinaryOp op);  // "add", "sub", "mul", "div"

inline constexpr int kMaxBroadcastDims = 8;

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b);
// Both defined and with different shapes: the case the elementwise ops hand to broadcasting.
inline bool shapes_differ(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.shape() != b.shape();
}

Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor reduce_to_shape(const Tensor& grad, const Shape& shape);
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace tandem::kernels
