#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/precision.h"
#include "kernels/conv.h"

namespace tandem {

// A conv2d of geometry p is one trilinear form <g, conv2d(x, w)> = <conv2d_input_grad(g, w),
// x> = <conv2d_weight_grad(g, x), w>, so each of the three maps differentiates into the
// other two with the same geometry: the second-order rules below close over these three
// ops and every order is exact. conv_transpose2d is conv2d_input_grad with its output shape
// fixed by output_padding.
//
// Each op reads its operands in the compute dtype in force when it runs forward, and its
// backward and second-order rules use that same dtype (precision.h).

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
  const OperandCast in{compute_dtype()};
  Variable y = make_result(
      kernels::conv2d(in(x.data()), in(weight.data()), p), "conv2d", {x, weight},
      [X = x.data(), W = weight.data(), p, in](const Tensor& grad, const FunctionNode& node) {
        const Tensor g = in(grad);
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv2d_backward_input(g, in(W), X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv2d_backward_weight(g, in(X), W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x, weight, p, in](const Variable& g, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d_input_grad(g, weight, x.shape(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(g, x, weight.shape(), p) : Variable()};
      });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                          const kernels::Conv2dParams& p) {
  const OperandCast in{compute_dtype()};
  Variable y = make_result(
      kernels::conv_transpose2d(in(x.data()), in(weight.data()), p), "conv_transpose2d", {x, weight},
      [X = x.data(), W = weight.data(), p, in](const Tensor& grad, const FunctionNode& node) {
        const Tensor g = in(grad);
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv_transpose2d_backward_input(g, in(W), X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv_transpose2d_backward_weight(g, in(X), W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x, weight, p0 = without_output_padding(p), in](const Variable& g, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        // y = conv2d_input_grad(x, weight) for the conv2d that maps y's shape to x's.
        return Grads{node.needs_input_grad(0) ? conv2d(g, weight, Variable(), p0) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(x, g, weight.shape(), p0) : Variable()};
      });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv2d_input_grad(const Variable& grad, const Variable& weight, const Shape& x_shape,
                           const kernels::Conv2dParams& p) {
  const OperandCast in{compute_dtype()};
  return make_result(
      kernels::conv2d_backward_input(in(grad.data()), in(weight.data()), x_shape, p), "conv2d_input_grad",
      {grad, weight},
      [G = grad.data(), W = weight.data(), p, in](const Tensor& ggrad, const FunctionNode& node) {
        const Tensor gg = in(ggrad);
        Tensor dg, dw;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(gg, in(W), p);
        if (node.needs_input_grad(1)) dw = kernels::conv2d_backward_weight(in(G), gg, W.shape(), p);
        return std::vector<Tensor>{dg, dw};
      },
      [grad, weight, p, in](const Variable& gg, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d(gg, weight, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(grad, gg, weight.shape(), p) : Variable()};
      });
}

Variable conv2d_weight_grad(const Variable& grad, const Variable& x, const Shape& weight_shape,
                            const kernels::Conv2dParams& p) {
  const OperandCast in{compute_dtype()};
  return make_result(
      kernels::conv2d_backward_weight(in(grad.data()), in(x.data()), weight_shape, p), "conv2d_weight_grad",
      {grad, x},
      [G = grad.data(), X = x.data(), p, in](const Tensor& ggrad, const FunctionNode& node) {
        const Tensor gg = in(ggrad);
        Tensor dg, dx;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(in(X), gg, p);
        if (node.needs_input_grad(1)) dx = kernels::conv2d_backward_input(in(G), gg, X.shape(), p);
        return std::vector<Tensor>{dg, dx};
      },
      [grad, x, p, in](const Variable& gg, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d(x, gg, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_input_grad(grad, gg, x.shape(), p) : Variable()};
      });
}

}  // namespace tandem
