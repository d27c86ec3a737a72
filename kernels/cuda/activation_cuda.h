// CUDA twins of kernels/activation.h. CUDA builds only.
//
// Contract: same signatures, formulas (the sign-branching stable sigmoid and softplus)
// and errors as the CPU kernels; runs on the compute stream without waiting. The fused
// bias + activation (kernels/bias_activation.h) lives here too: its backward sums the
// bias gradient in double with the deterministic channel sums of sums.cuh.
#pragma once

#include "kernels/bias_activation.h"
#include "runtime/tensor.h"

namespace tandem::kernels::cuda {

Tensor sign_class(const Tensor& x);  // kernels/sign_class.h
Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor leaky_relu(const Tensor& x, double slope);
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double slope);
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& grad, const Tensor& y);
Tensor sigmoid(const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);
Tensor softplus(const Tensor& x);
Tensor softplus_backward(const Tensor& grad, const Tensor& x);
Tensor bias_activation(const Tensor& x, const Tensor& bias, Activation act, double slope, double gain,
                       double clamp);
BiasActivationGrads bias_activation_backward(const Tensor& grad, const Tensor& y, Activation act,
                                             double slope, double gain, double clamp);

}  // namespace tandem::kernels::cuda
