#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/conv.h"

namespace tandem {

// A conv2d of geometry p is one trilinear form <g, conv2d(x, w)> = <conv2d_input_grad(g, w),
// x> = <conv2d_weight_grad(g, x), w>, so each of the three maps differentiates into the
// other two with the same geometry: the second-order rules below close over these three
// ops and every order is exact. conv_transpose2d is conv2d_input_grad with its output shape
// fixed by output_padding.

namespace {

using Grads = std::vector<Variable>;

// The geometry of the conv2d a conv_transpose2d is the adjoint of: the output padding only
// fixes the output shape, which the second-order rules pass explicitly.
kernels::Conv2dParams without_output_padding(kernels::Conv2dParams p) {
  p.output_padding = 0;
  return p;
}

}  // namespace

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const kernels::Conv2dParams& p) {
  Variable y = make_result(
      kernels::conv2d(x.data(), weight.data(), p), "conv2d", {x, weight},
      [X = x.data(), W = weight.data(), p](const Tensor& g, const FunctionNode& node) {
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv2d_backward_input(g, W, X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv2d_backward_weight(g, X, W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x, weight, p](const Variable& g, const FunctionNode& node) {
        return Grads{node.needs_input_grad(0) ? conv2d_input_grad(g, weight, x.shape(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(g, x, weight.shape(), p) : Variable()};
      });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                          const kernels::Conv2dParams& p) {
  Variable y = make_result(
      kernels::conv_transpose2d(x.data(), weight.data(), p), "conv_transpose2d", {x, weight},
      [X = x.data(), W = weight.data(), p](const Tensor& g, const FunctionNode& node) {
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv_transpose2d_backward_input(g, W, X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv_transpose2d_backward_weight(g, X, W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x, weight, p0 = without_output_padding(p)](const Variable& g, const FunctionNode& node) {
        // y = conv2d_input_grad(x, weight) for the conv2d that maps y's shape to x's.
        return Grads{node.needs_input_grad(0) ? conv2d(g, weight, Variable(), p0) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(x, g, weight.shape(), p0) : Variable()};
      });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv2d_input_grad(const Variable& grad, const Variable& weight, const Shape& x_shape,
                           const kernels::Conv2dParams& p) {
  return make_result(
      kernels::conv2d_backward_input(grad.data(), weight.data(), x_shape, p), "conv2d_input_grad",
      {grad, weight},
      [G = grad.data(), W = weight.data(), p](const Tensor& gg, const FunctionNode& node) {
        Tensor dg, dw;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(gg, W, p);
        if (node.needs_input_grad(1)) dw = kernels::conv2d_backward_weight(G, gg, W.shape(), p);
        return std::vector<Tensor>{dg, dw};
      },
      [grad, weight, p](const Variable& gg, const FunctionNode& node) {
        return Grads{node.needs_input_grad(0) ? conv2d(gg, weight, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(grad, gg, weight.shape(), p) : Variable()};
      });
}

Variable conv2d_weight_grad(const Variable& grad, const Variable& x, const Shape& weight_shape,
                            const kernels::Conv2dParams& p) {
  return make_result(
      kernels::conv2d_backward_weight(grad.data(), x.data(), weight_shape, p), "conv2d_weight_grad",
      {grad, x},
      [G = grad.data(), X = x.data(), p](const Tensor& gg, const FunctionNode& node) {
        Tensor dg, dx;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(X, gg, p);
        if (node.needs_input_grad(1)) dx = kernels::conv2d_backward_input(G, gg, X.shape(), p);
        return std::vector<Tensor>{dg, dx};
      },
      [grad, x, p](const Variable& gg, const FunctionNode& node) {
        return Grads{node.needs_input_grad(0) ? conv2d(x, gg, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_input_grad(grad, gg, x.shape(), p) : Variable()};
      });
}

}  // namespace tandem
