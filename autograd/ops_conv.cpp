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
// Each op reads its operands in the compute dtype in force when it runs forward, rounded
// once there (round_operand), and its backward and second-order rules keep those rounded
// operands and round the incoming gradient to that same dtype (precision.h).

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
  const Variable xr = in(x), wr = in(weight);
  Variable y = make_result(
      kernels::conv2d(xr.data(), wr.data(), p), "conv2d", {xr, wr},
      [X = xr.data(), W = wr.data(), p, in](const Tensor& grad, const FunctionNode& node) {
        const Tensor g = in(grad);
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv2d_backward_input(g, W, X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv2d_backward_weight(g, X, W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x = xr, weight = wr, p, in](const Variable& g, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d_input_grad(g, weight, x.shape(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(g, x, weight.shape(), p) : Variable()};
      });
  return bias.defined() ? add_bias(y, bias) : y;
}

Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                          const kernels::Conv2dParams& p) {
  const OperandCast in{compute_dtype()};
  const Variable xr = in(x), wr = in(weight);
  Variable y = make_result(
      kernels::conv_transpose2d(xr.data(), wr.data(), p), "conv_transpose2d", {xr, wr},
      [X = xr.data(), W = wr.data(), p, in](const Tensor& grad, const FunctionNode& node) {
        const Tensor g = in(grad);
        Tensor gx, gw;
        if (node.needs_input_grad(0)) gx = kernels::conv_transpose2d_backward_input(g, W, X.shape(), p);
        if (node.needs_input_grad(1)) gw = kernels::conv_transpose2d_backward_weight(g, X, W.shape(), p);
        return std::vector<Tensor>{gx, gw};
      },
      [x = xr, weight = wr, p0 = without_output_padding(p), in](const Variable& g, const FunctionNode& node) {
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
  const Variable gr = in(grad), wr = in(weight);
  return make_result(
      kernels::conv2d_backward_input(gr.data(), wr.data(), x_shape, p), "conv2d_input_grad", {gr, wr},
      [G = gr.data(), W = wr.data(), p, in](const Tensor& ggrad, const FunctionNode& node) {
        const Tensor gg = in(ggrad);
        Tensor dg, dw;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(gg, W, p);
        if (node.needs_input_grad(1)) dw = kernels::conv2d_backward_weight(G, gg, W.shape(), p);
        return std::vector<Tensor>{dg, dw};
      },
      [grad = gr, weight = wr, p, in](const Variable& gg, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d(gg, weight, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_weight_grad(grad, gg, weight.shape(), p) : Variable()};
      });
}

Variable conv2d_weight_grad(const Variable& grad, const Variable& x, const Shape& weight_shape,
                            const kernels::Conv2dParams& p) {
  const OperandCast in{compute_dtype()};
  const Variable gr = in(grad), xr = in(x);
  return make_result(
      kernels::conv2d_backward_weight(gr.data(), xr.data(), weight_shape, p), "conv2d_weight_grad", {gr, xr},
      [G = gr.data(), X = xr.data(), p, in](const Tensor& ggrad, const FunctionNode& node) {
        const Tensor gg = in(ggrad);
        Tensor dg, dx;
        if (node.needs_input_grad(0)) dg = kernels::conv2d(X, gg, p);
        if (node.needs_input_grad(1)) dx = kernels::conv2d_backward_input(G, gg, X.shape(), p);
        return std::vector<Tensor>{dg, dx};
      },
      [grad = gr, x = xr, p, in](const Variable& gg, const FunctionNode& node) {
        PrecisionScope precision(in.dtype);
        return Grads{node.needs_input_grad(0) ? conv2d(x, gg, Variable(), p) : Variable(),
                     node.needs_input_grad(1) ? conv2d_input_grad(grad, gg, x.shape(), p) : Variable()};
      });
}

}  // namespace tandem
