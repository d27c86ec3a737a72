// Convolutions on the CPU through oneDNN, for kernels/cpu/conv.cpp, and the choice between
// them and the Eigen path (im2col + GEMM) that stays the fallback and the tests' reference.
//
// Contract:
// - CpuConvBackend: `onednn` runs float32 CPU convolutions through oneDNN (and the float32
//   GEMMs of gemm_onednn.h); `eigen` runs every CPU convolution by im2col + Eigen GEMM. float64 always runs
//   on Eigen (oneDNN has no float64 convolution), and without oneDNN in the build (onednn_built() false,
//   CMake's TANDEM_ONEDNN) every backend runs Eigen. CUDA tensors ignore it.
// - cpu_conv_backend(): the backend in force. Until set_cpu_conv_backend is called it is read
//   from the environment variable TANDEM_CONV_BACKEND (eigen | onednn; unset or empty:
//   onednn) at the first call; any other value throws an Error naming the variable, the value
//   and the accepted ones. reset_cpu_conv_backend() forgets a set backend.
// - cpu_conv_threads(): the threads one oneDNN convolution runs on. Eigen's GEMM runs on the
//   calling thread alone in this build (nothing is compiled with OpenMP), so this is 1 unless
//   set_cpu_conv_threads or TANDEM_CPU_THREADS (a positive integer, read at the first call)
//   says otherwise. oneDNN runs on OpenMP (Debian's build): a call sets the calling thread's
//   OpenMP thread count (omp_set_num_threads) to it.
// - onednn_conv_forward / _backward_input / _backward_weight: the same maps as the Eigen
//   kernels of conv.cpp for the conv2d geometry g (the tensors' roles as there; a transposed
//   convolution is one of them with the roles swapped), with g's `dilation` (spacing between
//   kernel taps) and `groups` (weight [o, c / groups, kh, kw]). Each returns true having
//   written its output, or false having touched nothing: backend eigen, inputs neither
//   float32 nor bfloat16 (bfloat16 inputs give a float32 output, and run only where
//   onednn_bf16_native()), or no oneDNN in the build. An empty batch gives zeros (weight gradient) or an
//   empty output. A oneDNN failure throws an Error naming `op`, the shapes and oneDNN's status.
// - Each (pass, geometry, dilation, groups, thread count, layout) makes its primitives once
//   and keeps them for the process's life; every call gets its own scratchpad and reorder
//   buffers, so threads may run convolutions at once.
// - Deterministic: the same inputs and thread count give bitwise the same outputs, call to
//   call and process to process on one machine.
// - OnednnLayout: `plain` hands oneDNN tandem's NCHW / OIHW tensors as they are; `preferred`
//   lets oneDNN pick its blocked layouts and reorders into and out of them within the call;
//   `automatic` (the default; set_onednn_layout changes it, for benchmarks and tests) takes
//   plain where the conv2d's input has fewer than kPlainBelowChannels channels per group
//   (an image: a GAN's first D layer, its last G layer), preferred elsewhere, which
//   conv_bench measured the faster of the two on the dcgan and dcgan64 layers. The choice
//   depends on the shape alone, so it is the same in every process.
#pragma once

#include "kernels/conv_geometry.h"

namespace tandem::kernels::cpu {

enum class CpuConvBackend { eigen, onednn };

CpuConvBackend cpu_conv_backend();
void set_cpu_conv_backend(CpuConvBackend backend);
void reset_cpu_conv_backend();
const char* cpu_conv_backend_name(CpuConvBackend backend);
bool onednn_built();

// Whether oneDNN runs bfloat16 natively on this CPU (AVX512_BF16 or AMX). Without it, its
// bfloat16 primitives would be emulation or reference code, and reduced-precision GEMMs and
// convolutions take the widened float32 kernels instead (kernels/gemm.h, conv.h). false
// without oneDNN in the build.
bool onednn_bf16_native();

// Whether oneDNN takes a CPU convolution or GEMM on operands of `dtype`: oneDNN is in the
// build, the backend is onednn, and the dtype is float32, or bfloat16 where onednn_bf16_native().
// The one test of the convolutions here, of gemm_onednn.h and of kernels/reduced_precision.h.
bool onednn_takes(DType dtype);

int cpu_conv_threads();
void set_cpu_conv_threads(int threads);

enum class OnednnLayout { automatic, plain, preferred };
constexpr int64_t kPlainBelowChannels = 4;
OnednnLayout onednn_layout();
void set_onednn_layout(OnednnLayout layout);

bool onednn_conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y,
                         const conv_detail::Geometry& g);
bool onednn_conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                                const conv_detail::Geometry& g);
bool onednn_conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                                 const conv_detail::Geometry& g);

}  // namespace tandem::kernels::cpu
