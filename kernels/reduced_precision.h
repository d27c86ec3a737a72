// Which kernels a 16-bit compute dtype's GEMMs and convolutions run on (kernels/gemm.h,
// conv.h), in words a run can print, so that nobody trains in fp16 on a CPU expecting it to
// be faster than float32.
//
// Contract: reduced_precision_kernels(dtype, on_gpu) is "" for float32 and float64; for
// bfloat16 and float16 it names the path the operands take on a GPU (on_gpu) or on this
// process's CPU, and where that path is float32 work on widened operands it says that the
// step costs more than float32's.
#pragma once

#include <string>

#include "runtime/dtype.h"

namespace tandem::kernels {

std::string reduced_precision_kernels(DType dtype, bool on_gpu);

}  // namespace tandem::kernels
