// Multi-tensor optimizer updates on CUDA tensors (kernels/cuda/optim.cu). CUDA builds only.
//
// Contract: as kernels/optim.h, whose functions check the operands and then route here;
// these do no checks of their own. Each call is one kernel launch for the whole group, on
// the compute stream, and returns without waiting.
#pragma once

#include <vector>

#include "kernels/optim.h"

namespace tandem::kernels::cuda {

void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                  const AdamStep& step);
void sgd_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& momentum_buffers, const SgdStep& step);
double* graph_scalars_array(StepCapture& capture, Device device, size_t count);
void write_graph_scalars(double* array, Device device, const std::vector<double>& values);

}  // namespace tandem::kernels::cuda
