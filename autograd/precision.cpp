#include "autograd/precision.h"

#include <utility>
#include <vector>

#include "autograd/function.h"
#include "runtime/error.h"

namespace tandem {

namespace {
thread_local DType t_compute_dtype = DType::f32;
}

DType compute_dtype() { return t_compute_dtype; }

void check_compute_dtype(DType dtype, const std::string& what) {
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
               what << ": compute dtype " << dtype_name(dtype)
                    << " is not one a model computes in (float32, bfloat16 or float16)");
}

PrecisionScope::PrecisionScope(DType dtype) : previous_(t_compute_dtype) {
  check_compute_dtype(dtype, "PrecisionScope");
  t_compute_dtype = dtype;
}

PrecisionScope::~PrecisionScope() { t_compute_dtype = previous_; }

Tensor compute_operand(const Tensor& t, DType compute) {
  if (compute == DType::f32 || !t.defined() || t.dtype() != DType::f32) return t;
  return t.to(compute);
}

Variable round_operand(const Variable& x, DType compute) {
  if (!x.defined()) return x;
  Tensor rounded = compute_operand(x.data(), compute);
  if (rounded.shares_storage_with(x.data())) return x;
  return make_result(
      std::move(rounded), "round_operand", {x},
      [](const Tensor& grad, const FunctionNode&) { return std::vector<Tensor>{grad}; },
      [](const Variable& grad, const FunctionNode&) { return std::vector<Variable>{grad}; });
}

}  // namespace tandem
