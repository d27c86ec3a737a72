// Running a Sequential with each biased layer and the activation after it fused.
//
// Contract: forward_fused(layers, x) returns what layers.forward(x) returns, with the
// same parameters and the same graph inputs, but where a Linear, Conv2d or
// ConvTranspose2d with a bias is followed directly by ReLU, LeakyReLU (slope > 0), Tanh
// or Sigmoid, the layer runs without its bias and one bias_activation op (ops.h) adds the
// bias and applies the activation. On the CPU the result and every gradient are bitwise
// those of the unfused forward (kernels/bias_activation.h). Other children run as they are.
#pragma once

#include "autograd/nn.h"

namespace tandem::models {

Variable forward_fused(const nn::Sequential& layers, const Variable& x);

}  // namespace tandem::models
