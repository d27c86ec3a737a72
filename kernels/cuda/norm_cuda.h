// CUDA twins of kernels/norm.h. CUDA builds only.
//
// Contract: same signatures, formulas and errors as the CPU kernels: statistics in double
// (two passes, variance about the mean), biased variance for normalising, unbiased for
// running_var; running stats updated in place on the GPU. Runs on the compute stream
// without waiting.
#pragma once

#include "kernels/norm.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps, BatchNormSaved& saved);
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, double eps);
BatchNormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& gamma,
                                   const BatchNormSaved& saved);

}  // namespace tandem::kernels::cuda
