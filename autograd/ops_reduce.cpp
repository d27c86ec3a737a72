#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace tandem {

Variable sum(const Variable& x) {
  return make_result(kernels::sum_all(x.data()), "sum", {x},
                     [shape = x.shape()](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::expand_scalar(g, shape)};
                     });
}

Variable mean(const Variable& x) {
  return make_result(
      kernels::mean_all(x.data()), "mean", {x},
      [shape = x.shape(), n = x.numel()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::expand_scalar(g, shape), 1.0 / double(n))};
      });
}

Variable sum(const Variable& x, int64_t axis, bool keepdim) {
  return make_result(kernels::sum_axis(x.data(), axis, keepdim), "sum_axis", {x},
                     [shape = x.shape(), axis](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::expand_axis(g, shape, axis)};
                     });
}

Variable mean(const Variable& x, int64_t axis, bool keepdim) {
  return make_result(
      kernels::mean_axis(x.data(), axis, keepdim), "mean_axis", {x},
      [shape = x.shape(), axis, n = x.size(axis)](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::expand_axis(g, shape, axis), 1.0 / double(n))};
      });
}

}  // namespace tandem
