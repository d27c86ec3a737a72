#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/pool.h"

namespace tandem {

Variable upsample_nearest2x(const Variable& x) {
  return make_result(kernels::upsample_nearest2x(x.data()), "upsample_nearest2x", {x},
                     [](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::upsample_nearest2x_backward(g)};
                     });
}

Variable avg_pool2x(const Variable& x) {
  return make_result(kernels::avg_pool2x(x.data()), "avg_pool2x", {x},
                     [](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::avg_pool2x_backward(g)};
                     });
}

}  // namespace tandem
