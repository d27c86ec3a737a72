// Batch normalisation over axis 1 of [N, C], [N, C, L] or [N, C, H, W].
//
// Contract:
// batch_norm_train: normalises with the batch statistics (biased variance), returns y and
//   saves mean and inverse std per channel in `saved`; updates running_mean/running_var in
//   place (unbiased variance, running = (1 - momentum) * running + momentum * batch) when
//   they are defined.
// batch_norm_eval: normalises with the running statistics.
// batch_norm_backward: gradients for x, gamma and beta of the training-mode forward.
// x is float32, float64 or bfloat16 (a rounded operand, autograd/precision.h); everything
// else (gamma, beta, the statistics, the gradient, y and the gradients returned) is in x's
// accumulate_dtype (runtime/dtype.h: float32 for bfloat16, x's own otherwise). A bfloat16 x
// gives bitwise the results of its float32 widening.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

struct BatchNormSaved {
  Tensor mean;     // [C]
  Tensor inv_std;  // [C]
};

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps, BatchNormSaved& saved);
Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, double eps);

struct BatchNormGrads {
  Tensor x, gamma, beta;
};
BatchNormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& gamma,
                                   const BatchNormSaved& saved);

}  // namespace tandem::kernels
