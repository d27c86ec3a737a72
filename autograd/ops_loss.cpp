#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"

namespace tandem {

Variable bce_with_logits(const Variable& logits, const Variable& targets) {
  return make_result(
      kernels::bce_with_logits(logits.data(), targets.data()), "bce_with_logits", {logits, targets},
      [X = logits.data(), T = targets.data()](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{
            n.needs_input_grad(0) ? kernels::bce_with_logits_backward(g, X, T) : Tensor(),
            n.needs_input_grad(1) ? kernels::neg(kernels::mul(g, X)) : Tensor()};
      },
      [logits, targets](const Variable& g, const FunctionNode& n) {
        // d/dx = g (sigmoid(x) - t), d/dt = -g x, on Variables.
        return std::vector<Variable>{
            n.needs_input_grad(0) ? mul(g, sub(sigmoid(logits), targets)) : Variable(),
            n.needs_input_grad(1) ? neg(mul(g, logits)) : Variable()};
      });
}

}  // namespace tandem
