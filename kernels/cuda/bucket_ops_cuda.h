// Bucket pack/unpack on CUDA tensors (kernels/cuda/bucket_ops.cu, on the multi-tensor
// kernel the optimizers use). CUDA builds only.
//
// Contract: as kernels/bucket_ops.h, whose functions check the operands and then route
// here; these do no checks of their own. Each call is one kernel launch for all parts, on
// the compute stream, and returns without waiting.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

void pack_(Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
           const std::vector<int64_t>& counts, double scale);
void unpack_(const Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
             double scale);

}  // namespace tandem::kernels::cuda
