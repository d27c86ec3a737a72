// The sign class of a tensor: all that relu's and leaky_relu's backward read of their input
// (and the fused bias_activation's of its output, without gain or clamp), in one byte where
// the tensor takes four or eight. The activation ops keep it for backward instead of the
// float tensor, which is then freed unless something else holds it (ops_activation.cpp).
//
// Contract:
// - sign_class(x): a uint8 tensor of x's shape and device, kSignPositive where x > 0,
//   kSignNonPositive where x <= 0 (-0 included), kSignNaN where x is NaN.
// - The backward kernels that accept it (activation.h, bias_activation.h) return, bit for
//   bit, what they return from the float tensor, except a NaN's payload, through the
//   formulas below. (Reading the class as a value, 1, 0 or NaN, through the float formula
//   would be one formula fewer, but its CPU loop does not vectorise: 25x slower.)
// - check_saved_sign: the checks of a backward whose saved tensor is the float tensor (same
//   dtype as the gradient) or its sign class; both defined, same shape and device. Errors
//   name the op and the operands.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "runtime/tensor.h"

namespace tandem::kernels {

inline constexpr uint8_t kSignNonPositive = 0;
inline constexpr uint8_t kSignPositive = 1;
inline constexpr uint8_t kSignNaN = 2;

Tensor sign_class(const Tensor& x);

// Written without branches, so that the CPU loop vectorises: a branch on a sign that
// changes from element to element is mispredicted half the time.
template <typename T>
TANDEM_HOST_DEVICE inline uint8_t sign_class_of(T v) {
  return static_cast<uint8_t>(static_cast<uint8_t>(v > T(0)) |
                              static_cast<uint8_t>(static_cast<uint8_t>(v != v) << 1));
}

// relu's and leaky_relu's backward from the sign class c of the tensor they read, as they
// compute it from the tensor: the gradient above zero, zero (relu) or the slope times the
// gradient (leaky_relu) at or below it, NaN for NaN. One formula for the CPU loops and the
// CUDA kernels; `nan` is a quiet NaN of T from the caller (device code cannot name one).
template <typename T>
TANDEM_HOST_DEVICE inline T relu_backward_from_class(T g, uint8_t c, T nan) {
  return c == kSignPositive ? g : c == kSignNonPositive ? T(0) : nan;
}

template <typename T>
TANDEM_HOST_DEVICE inline T leaky_relu_backward_from_class(T g, uint8_t c, T slope, T nan) {
  return c == kSignPositive ? g : c == kSignNonPositive ? slope * g : nan;
}

void check_saved_sign(const char* op, const Tensor& grad, const Tensor& saved, const char* saved_name);

}  // namespace tandem::kernels
