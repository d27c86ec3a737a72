// Internal to the broadcast kernels (kernels/cpu/broadcast.cpp, kernels/cuda/broadcast.cu):
// the strides that map an output element to its two operands, and the binary formulas,
// written once for both devices.
#pragma once

#include "kernels/broadcast.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

// Output sizes, and each operand's element stride along each output axis (0 where the
// operand is broadcast along it). Passed to CUDA kernels by value.
struct BroadcastLayout {
  int rank = 0;
  int64_t sizes[kMaxBroadcastDims] = {};
  int64_t a_strides[kMaxBroadcastDims] = {};
  int64_t b_strides[kMaxBroadcastDims] = {};
};

// The strides of an operand of shape `in` broadcast to `out` (which broadcast_shape made).
inline void broadcast_strides(const Shape& out, const Shape& in, int64_t* strides) {
  const size_t lead = out.size() - in.size();
  int64_t stride = 1;
  for (size_t d = out.size(); d-- > 0;) {
    const int64_t size = d < lead ? 1 : in[d - lead];
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
}

inline BroadcastLayout make_broadcast_layout(const Shape& out, const Shape& a, const Shape& b) {
  BroadcastLayout l;
  l.rank = static_cast<int>(out.size());
  for (int d = 0; d < l.rank; ++d) l.sizes[d] = out[static_cast<size_t>(d)];
  broadcast_strides(out, a, l.a_strides);
  broadcast_strides(out, b, l.b_strides);
  return l;
}

// The operands' offsets of output element i (row-major).
TANDEM_HOST_DEVICE inline void broadcast_offsets(const BroadcastLayout& l, int64_t i, int64_t& a_offset,
                                                 int64_t& b_offset) {
  a_offset = 0;
  b_offset = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    const int64_t k = i % l.sizes[d];
    i /= l.sizes[d];
    a_offset += k * l.a_strides[d];
    b_offset += k * l.b_strides[d];
  }
}

// clang-format off
struct AddFn { template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a + b; } };
struct SubFn { template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a - b; } };
struct MulFn { template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a * b; } };
struct DivFn { template <typename T> TANDEM_HOST_DEVICE T operator()(T a, T b) const { return a / b; } };
// clang-format on

// Calls visit(F{}) with the formula of `op`.
template <typename Visit>
void visit_binary_op(BinaryOp op, Visit&& visit) {
  switch (op) {
    case BinaryOp::add:
      return visit(AddFn{});
    case BinaryOp::sub:
      return visit(SubFn{});
    case BinaryOp::mul:
      return visit(MulFn{});
    case BinaryOp::div:
      return visit(DivFn{});
  }
}

}  // namespace tandem::kernels
