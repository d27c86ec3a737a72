// Scrubbing non-finite values out of a gradient (ReducerOptions::non_finite scrub).
//
// Contract: scrub_non_finite_(t, limit) replaces, in place, every NaN element of t with 0,
// every +Inf with +limit and every -Inf with -limit (limit rounded to t's dtype; finite
// elements keep their bits) and returns how many it replaced. t is float32 or float64 and
// contiguous, on the CPU or a GPU; the CUDA kernel is one launch on the compute stream,
// and the count is read back (the call waits for it). Other dtypes are an Error naming the
// op and the tensor.
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace tandem::kernels {

int64_t scrub_non_finite_(Tensor& t, double limit);

}  // namespace tandem::kernels
