#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/activation.h"
#include "kernels/sign_class.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// The local slope of a piecewise-linear activation as a constant (no history): its
// derivative is zero wherever it is defined, so the second-order rule is g * slope.
Variable constant_slope(Tensor slope) { return Variable(std::move(slope), false); }

Tensor ones_like(const Tensor& t) { return Tensor::ones(t.shape(), t.dtype(), t.device()); }

}  // namespace

// relu and leaky_relu keep the sign class of x, all their backward reads of it, in one byte
// per element (kernels/sign_class.h): x itself is freed unless something else holds it.
Variable relu(const Variable& x) {
  const Tensor c = records_graph({x}) ? kernels::sign_class(x.data()) : Tensor();
  return make_result(
      kernels::relu(x.data()), "relu", {x},
      [c](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::relu_backward(g, c)}; },
      [c](const Variable& g, const FunctionNode&) {
        return Grads{mul(g, constant_slope(kernels::relu_backward(ones_like(g.data()), c)))};
      });
}

Variable leaky_relu(const Variable& x, double slope) {
  const Tensor c = records_graph({x}) ? kernels::sign_class(x.data()) : Tensor();
  return make_result(
      kernels::leaky_relu(x.data(), slope), "leaky_relu", {x},
      [c, slope](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::leaky_relu_backward(g, c, slope)};
      },
      [c, slope](const Variable& g, const FunctionNode&) {
        return Grads{mul(g, constant_slope(kernels::leaky_relu_backward(ones_like(g.data()), c, slope)))};
      });
}

// tanh, sigmoid and softplus: the second-order rules recompute the output from the input
// Variable (capturing the result would make a cycle), then apply the first-order formula
// with Variable ops.
Variable tanh(const Variable& x) {
  Tensor y = kernels::tanh(x.data());
  return make_result(
      y, "tanh", {x},
      [y](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::tanh_backward(g, y)}; },
      [x](const Variable& g, const FunctionNode&) {
        return Grads{mul(g, add_scalar(neg(square(tanh(x))), 1.0))};  // g (1 - y^2)
      });
}

Variable sigmoid(const Variable& x) {
  Tensor y = kernels::sigmoid(x.data());
  return make_result(
      y, "sigmoid", {x},
      [y](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::sigmoid_backward(g, y)};
      },
      [x](const Variable& g, const FunctionNode&) {
        Variable s = sigmoid(x);
        return Grads{mul(g, mul(s, add_scalar(neg(s), 1.0)))};  // g s (1 - s)
      });
}

Variable softplus(const Variable& x) {
  return make_result(
      kernels::softplus(x.data()), "softplus", {x},
      [X = x.data()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::softplus_backward(g, X)};
      },
      [x](const Variable& g, const FunctionNode&) { return Grads{mul(g, sigmoid(x))}; });
}

}  // namespace tandem
