// Activations, each with its backward beside it.
//
// Contract: forward returns a new tensor of x's shape. Backward takes the incoming
// gradient and what the forward saved (x, or the output y where that is cheaper) and
// returns the gradient with respect to x. relu_backward and leaky_relu_backward, which read
// only x's sign, also take sign_class(x) for x (kernels/sign_class.h), with the same result.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor relu(const Tensor& x);
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor leaky_relu(const Tensor& x, double slope);
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double slope);
Tensor tanh(const Tensor& x);
Tensor tanh_backward(const Tensor& grad, const Tensor& y);  // y = tanh(x)
Tensor sigmoid(const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);  // y = sigmoid(x)
Tensor softplus(const Tensor& x);                              // log(1 + exp(x)), stable
Tensor softplus_backward(const Tensor& grad, const Tensor& x);

}  // namespace tandem::kernels
