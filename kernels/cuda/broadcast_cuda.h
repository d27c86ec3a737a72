// CUDA twins of kernels/broadcast.h. CUDA builds only; kernels/cpu/broadcast.cpp checks the
// operands, allocates `out` (zeros for reduce_to_shape) and routes here when they are on a
// GPU. Each call runs on the compute stream, returns `out` without waiting, and sums in the
// CPU twin's order (bitwise equal results).
#pragma once

#include "kernels/broadcast.h"

namespace tandem::kernels::cuda {

Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor out);
Tensor reduce_to_shape(const Tensor& grad, Tensor out);
Tensor broadcast_to(const Tensor& x, Tensor out);

}  // namespace tandem::kernels::cuda
