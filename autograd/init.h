// Parameter initialisers (in place, on CPU float32/float64 data).
//
// Contract: each function overwrites the Variable's data and records nothing in autograd.
// Random ones draw from `gen` (the process-wide default generator unless one is passed),
// so a fixed seed gives the same values on every platform.
// - uniform_(v, lo, hi): U(lo, hi).       normal_(v, mean, std): N(mean, std^2) (DCGAN: 0, 0.02).
// - zeros_, ones_, constant_.
// - kaiming_uniform_(v, a): U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2))
//   (leaky-ReLU gain, fan_in mode, as torch.nn.init). With a = sqrt(5) this is
//   b = 1 / sqrt(fan_in): PyTorch's default for Linear and Conv weights.
// - fan_in(shape): shape[1] * prod(shape[2:]) for weights of dimension >= 2 (PyTorch's rule,
//   so for a transposed convolution's [C_in, C_out, k, k] weight it is C_out * k * k).
#pragma once

#include "autograd/variable.h"
#include "runtime/rng.h"

namespace tandem::nn::init {

int64_t fan_in(const Shape& weight_shape);

void uniform_(const Variable& v, double lo, double hi, Generator& gen = default_generator());
void normal_(const Variable& v, double mean, double std, Generator& gen = default_generator());
void constant_(const Variable& v, double value);
void zeros_(const Variable& v);
void ones_(const Variable& v);
void kaiming_uniform_(const Variable& v, double a = 0.0, Generator& gen = default_generator());

}  // namespace tandem::nn::init
