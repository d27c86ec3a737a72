// CUDA twins of kernels/index_ops.h. CUDA builds only; kernels/cpu/index_ops.cpp checks the
// arguments and the index values, allocates `out` and routes here when the tensors are on
// a GPU. x is [outer, size, inner] around `dim`. Each call runs on the compute stream
// and returns `out` without waiting.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

// out [outer, J, inner] from x [outer, size, inner].
Tensor index_select(const Tensor& x, const Tensor& index, int64_t size, int64_t inner, Tensor out);
// out [outer, size, inner] from grad [outer, J, inner]; every element of out is written.
Tensor index_select_backward(const Tensor& grad, const Tensor& index, int64_t size, int64_t inner,
                             Tensor out);
Tensor one_hot(const Tensor& index, int64_t classes, Tensor out);

}  // namespace tandem::kernels::cuda
