#include "kernels/reduced_precision.h"

#include "kernels/cpu/conv_onednn.h"

namespace tandem::kernels {

std::string reduced_precision_kernels(DType dtype, bool on_gpu) {
  if (!is_16bit_float(dtype)) return "";
  if (on_gpu) return "cuBLAS's 16-bit GEMMs on tensor cores (convolutions by im2col around them)";
  if (cpu::onednn_takes(dtype)) return "oneDNN's native bf16 kernels";
  if (dtype == DType::bf16)
    return "float32 kernels on widened operands (no native bf16 on this CPU: slower than fp32)";
  return "float32 kernels on widened operands (no fp16 kernels on a CPU: slower than fp32)";
}

}  // namespace tandem::kernels
