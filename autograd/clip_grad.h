// Gradient clipping by norm (PyTorch's clip_grad_norm_, MMEngine's OptimWrapper clip_grad).
//
// Contract: grad_norm(params, norm_type) is the norm of the gradients of `params` taken as
// one vector: norm_type 2 (the square root of the sum of squares) or infinity (the largest
// magnitude). Parameters without a gradient are skipped; no gradient at all gives 0. It is
// computed on the host in float64, parameter by parameter in the given order and element
// by element in storage order, so equal gradients give a bitwise-equal norm on every rank
// (no communication: data-parallel ranks hold the same averaged gradients).
// clip_grad_norm_(params, max_norm, norm_type) returns that norm (before clipping) and,
// when it is finite and max_norm / (norm + 1e-6) < 1, multiplies every gradient in place by
// that coefficient (a gradient that is a view into a bucket stays one); otherwise the
// gradients are left untouched, bit for bit. max_norm must be positive and finite and
// norm_type 2 or infinity, else an Error naming the value.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace tandem {

double grad_norm(const std::vector<Variable>& params, double norm_type);
double clip_grad_norm_(const std::vector<Variable>& params, double max_norm, double norm_type);

}  // namespace tandem
