// A recorder of the convolutions and GEMMs a piece of work issues, for the kernel-floor
// benchmark (bench/kernel_floor_bench.cpp): what a training step asks of cuDNN and cuBLAS.
//
// Contract:
// - Off by default; start_kernel_recording() clears the record and switches it on,
//   stop_kernel_recording() switches it off and returns what was recorded. When off, a
//   kernel entry point pays one relaxed atomic load (kernel_recording()).
// - Recorded: each public convolution call of kernels/conv.h (its op, the shapes of its two
//   tensor operands and of its result, its parameters and dtype) and each kernels::gemm
//   (m, n, k, transposes, dtype; kernels::matmul goes through it), on any device. A GEMM
//   issued inside a recorded convolution (the im2col path's) is part of that convolution
//   and not recorded again. Equal calls are merged, with a count, in the order first seen.
// - Any thread may record (under one lock); start and stop are for one thread at a time.
// - conv_call_flops / gemm_call_flops: the multiply-adds times two of one call (a conv's
//   three passes cost the same: 2 N O Ho Wo C kh kw for its conv2d geometry).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/conv.h"

namespace tandem::kernels {

enum class ConvOp {
  conv2d,
  conv2d_backward_input,
  conv2d_backward_weight,
  conv_transpose2d,
  conv_transpose2d_backward_input,
  conv_transpose2d_backward_weight
};
const char* conv_op_name(ConvOp op);

// The operands as the op takes them: (a, b) are (x, weight) for the forward ops, (grad,
// weight) for backward_input, (grad, x) for backward_weight; `out` is the result's shape.
struct ConvCall {
  ConvOp op = ConvOp::conv2d;
  Shape a, b, out;
  Conv2dParams params;
  DType dtype = DType::f32;
  bool operator==(const ConvCall& other) const;
  std::string str() const;  // "conv2d x [64, 1, 28, 28] w [64, 1, 4, 4] s2 p1"
};

struct GemmCall {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  DType dtype = DType::f32;
  bool operator==(const GemmCall&) const = default;
  std::string str() const;  // "gemm 64x256x784 NT"
};

struct KernelRecord {
  std::vector<std::pair<ConvCall, int64_t>> convs;  // call, times issued
  std::vector<std::pair<GemmCall, int64_t>> gemms;
};

bool kernel_recording();
void start_kernel_recording();
KernelRecord stop_kernel_recording();

double conv_call_flops(const ConvCall& call);
double gemm_call_flops(const GemmCall& call);

// Held by a convolution entry point while it runs: records the call (when recording) and
// keeps the GEMMs it issues on this thread out of the record.
class ConvRecordScope {
 public:
  ConvRecordScope(ConvOp op, const Shape& a, const Shape& b, const Shape& out, const Conv2dParams& params,
                  DType dtype);
  ~ConvRecordScope();
  ConvRecordScope(const ConvRecordScope&) = delete;
  ConvRecordScope& operator=(const ConvRecordScope&) = delete;

 private:
  bool active_ = false;
};

// Called by kernels::gemm (when kernel_recording()).
void record_gemm(const GemmCall& call);

}  // namespace tandem::kernels
