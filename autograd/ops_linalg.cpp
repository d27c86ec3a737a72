#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/precision.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"

namespace tandem {

Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb) {
  // Operands rounded to the compute dtype once, here, and kept so for backward (precision.h).
  const OperandCast in{compute_dtype()};
  const Variable ar = in(a), br = in(b);
  Tensor out = kernels::matmul(ar.data(), br.data(), ta, tb);
  return make_result(
      out, "matmul", {ar, br},
      [A = ar.data(), B = br.data(), ta, tb, in](const Tensor& grad, const FunctionNode& node) {
        // C = op(A) op(B): dA = g op(B)^T (transposed back if A was), dB likewise.
        const Tensor g = in(grad);
        Tensor ga, gb;
        if (node.needs_input_grad(0)) {
          ga = ta ? kernels::matmul(B, g, tb, true) : kernels::matmul(g, B, false, !tb);
        }
        if (node.needs_input_grad(1)) {
          gb = tb ? kernels::matmul(g, A, true, ta) : kernels::matmul(A, g, !ta, false);
        }
        return std::vector<Tensor>{ga, gb};
      },
      [a = ar, b = br, ta, tb, in](const Variable& g, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        Variable ga, gb;  // the same formulas on Variables
        if (node.needs_input_grad(0)) ga = ta ? matmul(b, g, tb, true) : matmul(g, b, false, !tb);
        if (node.needs_input_grad(1)) gb = tb ? matmul(g, a, true, ta) : matmul(a, g, !ta, false);
        return std::vector<Variable>{ga, gb};
      });
}

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  TANDEM_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
               "linear: input " << shape_str(x.shape()) << " does not match weight "
                                << shape_str(weight.shape()) << " (expected [N, "
                                << (weight.dim() == 2 ? weight.size(1) : -1) << "])");
  Variable y = matmul(x, weight, false, true);
  return bias.defined() ? add_bias(y, bias) : y;
}

}  // namespace tandem
