// Convolutions through cuDNN, for kernels/cuda/conv.cu. CUDA builds only; with cuDNN absent
// from the build (TANDEM_HAVE_CUDNN 0) every function here returns false.
//
// Contract: each function computes the same map as its im2col twin of conv_cuda.h for the
// conv2d geometry g (the roles of the tensors as there) and returns true, or returns false
// having touched nothing, and the caller then runs im2col + cuBLAS: when the mode
// (kernels/conv_algorithm.h) is off, or cuDNN refuses the shape or dtype (an empty
// dimension, a tensor past cuDNN's int range, no algorithm that is deterministic and uses
// no tensor cores).
// - The algorithm is chosen on the first call of each (pass, geometry, dtype, device, mode),
//   by cuDNN's heuristics (mode on: cudnnGet*Algorithm_v7) or by timing them (benchmark:
//   cudnnFind*AlgorithmEx), and cached with its descriptors for the process's life.
// - Only deterministic algorithms in FMA math (float32 never rounded to TF32), so results
//   are the same run to run and stay within float32 reordering error of the CPU twin.
// - The workspace (at most 256 MiB) comes from tandem's caching allocator; everything runs
//   on the compute stream, with one cuDNN handle per device.
// - A failing cuDNN call throws an Error naming the call, file:line, cuDNN's message and
//   the op with its shapes.
#pragma once

#include "kernels/conv_geometry.h"

namespace tandem::kernels::cuda {

bool cudnn_conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y,
                        const conv_detail::Geometry& g);
bool cudnn_conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                               const conv_detail::Geometry& g);
bool cudnn_conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                                const conv_detail::Geometry& g);

}  // namespace tandem::kernels::cuda
