// Fill and dtype-conversion kernels behind Tensor::fill_ and Tensor::copy_ for CUDA
// tensors (installed by install_cuda_memory). CUDA builds only.
//
// Contract: both run on the compute stream and return without waiting. Conversions round
// to nearest even, as the CPU conversions of dtype.h do (the CPU twins); fill stores
// `value` converted the same way.
#pragma once

#include <cstdint>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tandem::cuda {

void device_fill(void* dst, Device device, DType dtype, int64_t count, double value);
void device_convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t count,
                    Device device);

}  // namespace tandem::cuda
