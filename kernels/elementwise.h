// Elementwise arithmetic (float32/float64, one device).
//
// Contract: add, sub, mul and div broadcast their operands as NumPy does (kernels/broadcast.h;
// equal shapes take the same-shape kernels, with no copy); so do maximum, minimum, compare
// and where (operands of other shapes are first repeated to the common shape); the other
// binary ops require equal shapes. The formulas of abs ... where are
// kernels/elementwise_math.h's, shared by the CPU and CUDA twins. All require equal dtypes and devices, and
// throw an Error naming the op and both shapes otherwise. Functions ending in `_` write into their first
// argument; the others return a new tensor.
#pragma once

#include "kernels/elementwise_math.h"
#include "runtime/tensor.h"

namespace tandem::kernels {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& a);
Tensor scale(const Tensor& a, double s);               // s * a
Tensor add_scalar(const Tensor& a, double s);          // a + s
void scale_(Tensor& a, double s);                      // a *= s
void axpy_(Tensor& y, double alpha, const Tensor& x);  // y += alpha * x
void add_(Tensor& y, const Tensor& x);                 // y += x
Tensor square(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor sign(const Tensor& a);                  // -1, 0 or 1 (0 for NaN)
Tensor pow_scalar(const Tensor& a, double p);  // a^p
// min(max(a, lo), hi), lo <= hi (an Error naming both otherwise; either may be infinite).
Tensor clamp(const Tensor& a, double lo, double hi);
Tensor clamp_mask(const Tensor& a, double lo, double hi);  // 1 where lo <= a <= hi, else 0
Tensor maximum(const Tensor& a, const Tensor& b);          // NaN where either is NaN
Tensor minimum(const Tensor& a, const Tensor& b);
using math::Comparison;
Tensor compare(const Tensor& a, const Tensor& b, Comparison op);  // 1 where `a op b`, else 0 (a's dtype)
// a where condition is non-zero, else b; condition has a's dtype (compare() makes such masks).
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);

// x: [N, C, ...]; bias: [C]. Adds bias[c] to every element of channel c (axis 1).
Tensor add_bias(const Tensor& x, const Tensor& bias);
// add_bias's argument checks (shared by the CPU and CUDA paths and the fused bias_activation):
// both defined, bias [C] for x's axis 1, same dtype and device; an Error naming `op` otherwise.
void check_channel_bias(const char* op, const Tensor& x, const Tensor& bias);
// The gradient of add_bias with respect to bias: sums grad over every axis except 1.
Tensor bias_grad(const Tensor& grad);

}  // namespace tandem::kernels
