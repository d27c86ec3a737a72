// sum_to and broadcast_to: each is the other's gradient, so broadcasting ops have rules of
// every order.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/broadcast.h"

namespace tandem {

Variable sum_to(const Variable& x, const Shape& shape) {
  return make_result(
      kernels::reduce_to_shape(x.data(), shape), "sum_to", {x},
      [in = x.shape()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::broadcast_to(g, in)};
      },
      [in = x.shape()](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{broadcast_to(g, in)};
      });
}

Variable broadcast_to(const Variable& x, const Shape& shape) {
  return make_result(
      kernels::broadcast_to(x.data(), shape), "broadcast_to", {x},
      [in = x.shape()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::reduce_to_shape(g, in)};
      },
      [in = x.shape()](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{sum_to(g, in)};
      });
}

}  // namespace tandem
