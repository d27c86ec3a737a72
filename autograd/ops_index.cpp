// Gathering by int64 indices. index_select's gradient (a scatter-add) is an op of its own
// whose gradient is index_select again, so the pair has rules of every order.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/index_ops.h"

namespace tandem {

namespace {

Variable index_select_backward(const Variable& g, const Shape& x_shape, int64_t dim, const Tensor& index) {
  return make_result(
      kernels::index_select_backward(g.data(), x_shape, dim, index), "index_select_backward", {g},
      [dim, index](const Tensor& gg, const FunctionNode&) {
        return std::vector<Tensor>{kernels::index_select(gg, dim, index)};
      },
      [dim, index](const Variable& gg, const FunctionNode&) {
        return std::vector<Variable>{index_select(gg, dim, index)};
      });
}

}  // namespace

Variable index_select(const Variable& x, int64_t dim, const Tensor& index) {
  return make_result(
      kernels::index_select(x.data(), dim, index), "index_select", {x},
      [shape = x.shape(), dim, index](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::index_select_backward(g, shape, dim, index)};
      },
      [shape = x.shape(), dim, index](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{index_select_backward(g, shape, dim, index)};
      });
}

Variable one_hot(const Tensor& index, int64_t classes, DType dtype) {
  return Variable(kernels::one_hot(index, classes, dtype));
}

}  // namespace tandem
