// The fused bias + activation's backward through the activation, from its output y, and
// its output gain and clamp both ways: one formula for the CPU twin
// (kernels/cpu/bias_activation.cpp) and the CUDA kernel (kernels/cuda/activation.cu), so
// the two cannot drift apart. relu and leaky_relu test y's sign, which is the input's for
// slope > 0; a NaN y passes through as NaN.
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

// StyleGAN's output gain and clamp after the activation: a * gain (only when gain != 1),
// then clamped to [-clamp, clamp] when clamp >= 0 (NaN stays NaN).
template <typename T>
TANDEM_HOST_DEVICE inline T gain_clamp(T a, T gain, T clamp) {
  if (gain != T(1)) a *= gain;
  if (clamp >= T(0)) a = a > clamp ? clamp : a < -clamp ? -clamp : a;
  return a;
}

// The backward of act, gain and clamp from the output y: 0 where the clamp acted (|y| <
// clamp fails, as StyleGAN's bias_act tests), else act' read from y / gain, times gain.
// With gain 1 and no clamp it is activate_backward itself.
template <typename T>
TANDEM_HOST_DEVICE inline T gain_clamp_backward(T g, T y, Activation act, T slope, T gain, T clamp) {
  if (clamp >= T(0) && !(y < clamp && y > -clamp)) return T(0);
  if (gain == T(1)) return activate_backward(g, y, act, slope);
  return activate_backward(g, y / gain, act, slope) * gain;
}

}  // namespace tandem::kernels
