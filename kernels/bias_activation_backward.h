// The fused bias + activation's backward through the activation, from its output y: one
// formula for the CPU twin (kernels/cpu/bias_activation.cpp) and the CUDA kernel
// (kernels/cuda/activation.cu), so the two cannot drift apart. relu and leaky_relu test y's
// sign, which is the input's for slope > 0; a NaN y passes through as NaN.
#pragma once

#include "kernels/bias_activation.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

template <typename T>
TANDEM_HOST_DEVICE inline T activate_backward(T g, T y, Activation act, T slope) {
  switch (act) {
    case Activation::none:
      return g;
    case Activation::relu:
      return y > T(0) ? g : y <= T(0) ? T(0) : y;
    case Activation::leaky_relu:
      return y > T(0) ? g : y <= T(0) ? slope * g : y;
    case Activation::tanh:
      return g * (T(1) - y * y);
    case Activation::sigmoid:
      return g * y * (T(1) - y);
  }
  return g;
}

}  // namespace tandem::kernels
