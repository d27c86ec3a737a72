// A bias followed by an activation in one pass, for layer outputs with channels on axis 1
// (NCHW convolution outputs, [N, F] linear outputs).
//
// Contract:
// - bias_activation(x, bias, act, slope, gain, clamp): x [N, C, ...], bias [C] (same dtype
//   and device) -> y = act(x + bias[c]) for every element of channel c. act is none, relu,
//   leaky_relu (slope > 0, used only there), tanh or sigmoid, with the formulas of
//   activation.h. StyleGAN's bias_act options: y is then multiplied by `gain` (finite, > 0)
//   when gain != 1, and clamped to [-clamp, clamp] when clamp >= 0 (its conv_clamp; a
//   negative clamp, the default, clamps nothing; NaN stays NaN).
// - bias_activation_backward(grad, y, act, slope, gain, clamp): the incoming gradient and
//   the forward's output -> {grad_x, grad_bias} in one pass: grad_x = act'(y) * grad as the
//   activation's backward computes it, grad_bias[c] = sum of grad_x over every axis but 1.
//   Where sign_class_stands_for_output (relu or leaky_relu, gain 1, no clamp), y may be its
//   sign class (kernels/sign_class.h), with the same results.
//   The slope of relu and leaky_relu is read from the sign of y (the same as the input's for
//   slope > 0). With a gain, act' is read from y / gain and grad_x multiplied by gain; with a
//   clamp, grad_x is 0 where |y| < clamp fails (where the forward clamped), as StyleGAN's.
// - The defaults (gain 1, no clamp) run exactly the operations they ran before the options.
// - On the CPU both equal, bit for bit, add_bias then the activation (forward) and the
//   activation's backward then bias_grad (backward): the same operations in the same order.
//   The CUDA twin (kernels/cuda/activation_cuda.h) sums grad_bias in double, as bias_grad
//   does there.
// - Errors name the op: a bias that does not match axis 1, mismatched dtypes or devices, a
//   leaky_relu slope <= 0, a gain that is not finite and > 0, a NaN clamp.
#pragma once

#include "runtime/tensor.h"

namespace tandem::kernels {

enum class Activation { none, relu, leaky_relu, tanh, sigmoid };

const char* activation_name(Activation act);

struct BiasActivationGrads {
  Tensor x;     // x's shape
  Tensor bias;  // [C]
};

// StyleGAN's clamp off: bias_activation's default clamp.
inline constexpr double kNoClamp = -1.0;

Tensor bias_activation(const Tensor& x, const Tensor& bias, Activation act, double slope = 0.0,
                       double gain = 1.0, double clamp = kNoClamp);
BiasActivationGrads bias_activation_backward(const Tensor& grad, const Tensor& y, Activation act,
                                             double slope = 0.0, double gain = 1.0, double clamp = kNoClamp);

// The forward's checks, which both devices share.
void check_bias_activation(const char* op, const Tensor& x, const Tensor& bias, Activation act, double slope,
                           double gain = 1.0, double clamp = kNoClamp);
void check_activation_slope(const char* op, Activation act, double slope);
// The backward's checks, which both devices share: grad and y (or its sign class where that
// stands for y) of one shape and device, the slope's and the gain's and clamp's.
void check_bias_activation_backward(const char* op, const Tensor& grad, const Tensor& y, Activation act,
                                    double slope, double gain, double clamp);
bool sign_class_stands_for_output(Activation act, double gain, double clamp);
void check_gain_clamp(const char* op, double gain, double clamp);

}  // namespace tandem::kernels
