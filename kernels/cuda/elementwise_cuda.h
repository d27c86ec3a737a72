// CUDA twins of kernels/elementwise.h. CUDA builds only; the kernels of kernels/cpu route
// here when their first tensor is on a GPU.
//
// Contract: same signatures, semantics and errors as the CPU kernels (named op, both
// shapes; a CPU operand next to a CUDA one is a device mismatch naming both tensors).
// Each call sets the tensor's device, runs on the compute stream and returns without
// waiting; outputs come from the caching allocator.
#pragma once

#include "kernels/elementwise_math.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor scale(const Tensor& a, double s);
Tensor add_scalar(const Tensor& a, double s);
void scale_(Tensor& a, double s);
void axpy_(Tensor& y, double alpha, const Tensor& x);
void add_(Tensor& y, const Tensor& x);
Tensor square(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);
Tensor pow_scalar(const Tensor& a, double p);
Tensor clamp(const Tensor& a, double lo, double hi);
Tensor clamp_mask(const Tensor& a, double lo, double hi);
// Same shapes (kernels/cpu broadcasts first).
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor compare(const Tensor& a, const Tensor& b, math::Comparison op);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);

Tensor add_bias(const Tensor& x, const Tensor& bias);
Tensor bias_grad(const Tensor& grad);

}  // namespace tandem::kernels::cuda
