// Gradient-bucket copies: between one flat buffer and the tensors laid out inside it.
//
// Contract:
// - Part i owns the slot flat[offsets[i], offsets[i] + count_i) with count_i its element
//   count; slots lie inside flat and do not overlap. flat and every defined part share one
//   device and one dtype (float32 or float64); parts may have any shape.
// - pack_: flat[offsets[i] + j] = scale * parts[i][j]. An undefined part (a parameter this
//   rank did not use) writes counts[i] zeros into its slot; a defined one must have
//   counts[i] elements. Elements of flat outside every slot keep their values.
// - unpack_: parts[i][j] = scale * flat[offsets[i] + j]; every part must be defined.
// - scale is rounded to the dtype, then each element is one rounded product (a plain
//   copy when scale = 1), so CPU and CUDA give the same bits. A part may be the view of
//   its own slot (gradient as bucket view): the copy then scales it in place.
// - On CUDA each call is one kernel launch for all parts, on the compute stream.
// Errors name the op, the part index and the shapes.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels {

void pack_(Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
           const std::vector<int64_t>& counts, double scale = 1.0);

void unpack_(const Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
             double scale = 1.0);

}  // namespace tandem::kernels
