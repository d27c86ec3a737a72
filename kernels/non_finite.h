// Finding and scrubbing non-finite values in a gradient (ReducerOptions::non_finite; the
// loss scaler's overflow check, autograd/loss_scaler.h).
//
// Contract: all_finite(t) is true when no element of t is NaN or +-Inf: one reduction on
// t's device (x * 0 is 0 for a finite x and NaN otherwise, so the sum is finite exactly
// when every element is), its one number read back. scrub_non_finite_(t, limit) replaces, in place, every NaN
// element of t with 0, every +Inf with +limit and every -Inf with -limit (limit rounded to t's dtype; finite
// elements keep their bits) and returns how many it replaced. t is float32 or float64 and
// contiguous, on the CPU or a GPU; the CUDA kernel is one launch on the compute stream,
// and the count is read back (the call waits for it). Other dtypes are an Error naming the
// op and the tensor.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

bool all_finite(const Tensor& t);
int64_t scrub_non_finite_(Tensor& t, double limit);

}  // namespace tandem::kernels
