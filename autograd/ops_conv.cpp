#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/conv.h"

namespace tandem {

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const kernels::Conv2dParams& p) {
  Variable y = make_result(kernels::conv2d(x.data(), weight.data(), p), "conv2d", {x, weight},
                           [X = x.data(), W = weight.data(), p](const Tensor& g, const FunctionNode& node) {
                             Tensor gx, gw;
                             if (node.needs_input_grad(0))
                               gx = kernels::conv2d_backward_input(g, W, X.shape(), p);
                             if (node.needs_input_grad(1))
                               gw = kernels::conv2d_backward_weight(g, X, W.shape(), p);
                             return std::vector<Tensor>{gx, gw};
                           });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                          const kernels::Conv2dParams& p) {
  Variable y =
      make_result(kernels::conv_transpose2d(x.data(), weight.data(), p), "conv_transpose2d", {x, weight},
                  [X = x.data(), W = weight.data(), p](const Tensor& g, const FunctionNode& node) {
                    Tensor gx, gw;
                    if (node.needs_input_grad(0))
                      gx = kernels::conv_transpose2d_backward_input(g, W, X.shape(), p);
                    if (node.needs_input_grad(1))
                      gw = kernels::conv_transpose2d_backward_weight(g, X, W.shape(), p);
                    return std::vector<Tensor>{gx, gw};
                  });
  return bias.defined() ? add_bias(y, bias) : y;
}

}  // namespace tandem
