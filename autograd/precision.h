// The compute precision: the dtype in which GEMMs and convolutions take their operands.
//
// Contract:
// - compute_dtype() is the calling thread's compute dtype: float32 (the default), bfloat16 or
//   float16. PrecisionScope sets it for a scope and restores the previous one on exit;
//   nn::Module::precision_scope() opens the one a module was given (module.h).
// - Under bfloat16 or float16, matmul, linear, conv2d, conv_transpose2d and their gradient ops
//   (ops.h) round their float32 operands to the compute dtype (round to nearest even) and
//   compute with float32 accumulation and a float32 result (kernels/gemm.h, conv.h): the
//   parameters, their gradients, the Reducer's buckets, optimizer state and every other op
//   stay float32, and an op's inputs are rounded where it reads them ("cast per op").
//   float64 operands (gradient checks) are never rounded.
// - An op takes the compute dtype in force when it runs forward, and its backward rounds the
//   incoming gradient to that same dtype (its saved operands are in it already, below),
//   whenever and on whatever thread the backward runs; its second-order rule (create_graph) runs under it
//   too. In float16 a rounded value above 65504 becomes infinite: the loss scaler's overflow check
//   (loss_scaler.h) sees it in the gradients.
// - Activations saved for backward are kept in the compute dtype: an op rounds each float32
//   operand once, in forward, through round_operand below, and its backward and second-order
//   rules hold those rounded copies, never the float32 inputs; a float32 input that nothing
//   else holds is freed after the forward. round_operand is differentiable as the identity
//   (its gradient passes through unchanged, in float32), so the gradients are those of the
//   op at the rounded values.
#pragma once

#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem {

DType compute_dtype();

// Checks that `dtype` is one a model computes in (float32, bfloat16, float16); the error
// names `what` (a flag, a module) and the dtype.
void check_compute_dtype(DType dtype, const std::string& what);

class PrecisionScope {
 public:
  explicit PrecisionScope(DType dtype);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  DType previous_;
};

// The operand a GEMM or convolution reads under compute dtype `compute`: `t` rounded to it
// (a copy), or `t` itself when `compute` is float32 or `t` is not float32.
Tensor compute_operand(const Tensor& t, DType compute);

// The operand an op saves under compute dtype `compute`: `x` rounded to it as a Variable
// whose gradient is passed to `x` unchanged (op name "round_operand"), or `x` itself when
// compute_operand would return x's data.
Variable round_operand(const Variable& x, DType compute);

// compute_operand and round_operand bound to the dtype an op was recorded under, for its
// forward and its backward closures.
struct OperandCast {
  DType dtype;
  Tensor operator()(const Tensor& t) const { return compute_operand(t, dtype); }
  Variable operator()(const Variable& x) const { return round_operand(x, dtype); }
};

}  // namespace tandem
