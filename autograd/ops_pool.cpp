#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/pool.h"

namespace tandem {

// Each op's backward is the other's forward up to a scale (kernels/pool.h), so the
// second-order rules close over the two ops and every order is exact.

Variable upsample_nearest2x(const Variable& x) {
  return make_result(
      kernels::upsample_nearest2x(x.data()), "upsample_nearest2x", {x},
      [](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::upsample_nearest2x_backward(g)};
      },
      [](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{scale(avg_pool2x(g), 4.0)};  // the sum of each 2x2 block
      });
}

Variable avg_pool2x(const Variable& x) {
  return make_result(
      kernels::avg_pool2x(x.data()), "avg_pool2x", {x},
      [](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::avg_pool2x_backward(g)};
      },
      [](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{scale(upsample_nearest2x(g), 0.25)};
      });
}

}  // namespace tandem
