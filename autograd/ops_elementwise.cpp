#include <optional>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/broadcast.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// The gradient of add_bias for the bias, as Variable ops: sum over every axis but 1.
Variable bias_grad_of(Variable g) {
  while (g.dim() > 2) g = sum(g, g.dim() - 1);
  return sum(g, 0);
}

// The shape an operand's gradient is summed back to, or nullopt when the operand already
// has the output's shape: then its gradient is the output's, passed on with no copy.
std::optional<Shape> broadcast_from(const Variable& operand, const Tensor& out) {
  if (operand.shape() == out.shape()) return std::nullopt;
  return operand.shape();
}

Tensor sum_back(const Tensor& g, const std::optional<Shape>& shape) {
  return shape ? kernels::reduce_to_shape(g, *shape) : g;
}

Variable sum_back(const Variable& g, const std::optional<Shape>& shape) {
  return shape ? sum_to(g, *shape) : g;
}

}  // namespace

Variable add(const Variable& a, const Variable& b) {
  Tensor out = kernels::add(a.data(), b.data());
  auto sa = broadcast_from(a, out), sb = broadcast_from(b, out);
  return make_result(
      std::move(out), "add", {a, b},
      [sa, sb](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{n.needs_input_grad(0) ? sum_back(g, sa) : Tensor(),
                                   n.needs_input_grad(1) ? sum_back(g, sb) : Tensor()};
      },
      [sa, sb](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? sum_back(g, sa) : Variable(),
                     n.needs_input_grad(1) ? sum_back(g, sb) : Variable()};
      });
}

Variable sub(const Variable& a, const Variable& b) {
  Tensor out = kernels::sub(a.data(), b.data());
  auto sa = broadcast_from(a, out), sb = broadcast_from(b, out);
  return make_result(
      std::move(out), "sub", {a, b},
      [sa, sb](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{n.needs_input_grad(0) ? sum_back(g, sa) : Tensor(),
                                   n.needs_input_grad(1) ? sum_back(kernels::neg(g), sb) : Tensor()};
      },
      [sa, sb](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? sum_back(g, sa) : Variable(),
                     n.needs_input_grad(1) ? sum_back(neg(g), sb) : Variable()};
      });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor out = kernels::mul(a.data(), b.data());
  auto sa = broadcast_from(a, out), sb = broadcast_from(b, out);
  return make_result(
      std::move(out), "mul", {a, b},
      [A = a.data(), B = b.data(), sa, sb](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{n.needs_input_grad(0) ? sum_back(kernels::mul(g, B), sa) : Tensor(),
                                   n.needs_input_grad(1) ? sum_back(kernels::mul(g, A), sb) : Tensor()};
      },
      [a, b, sa, sb](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? sum_back(mul(g, b), sa) : Variable(),
                     n.needs_input_grad(1) ? sum_back(mul(g, a), sb) : Variable()};
      });
}

// d(a / b) = g / b for a and -g a / b^2 for b.
Variable div(const Variable& a, const Variable& b) {
  Tensor out = kernels::div(a.data(), b.data());
  auto sa = broadcast_from(a, out), sb = broadcast_from(b, out);
  return make_result(
      std::move(out), "div", {a, b},
      [A = a.data(), B = b.data(), sa, sb](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{
            n.needs_input_grad(0) ? sum_back(kernels::div(g, B), sa) : Tensor(),
            n.needs_input_grad(1)
                ? sum_back(kernels::neg(kernels::div(kernels::mul(g, A), kernels::mul(B, B))), sb)
                : Tensor()};
      },
      [a, b, sa, sb](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? sum_back(div(g, b), sa) : Variable(),
                     n.needs_input_grad(1) ? sum_back(neg(div(mul(g, a), mul(b, b))), sb) : Variable()};
      });
}

Variable neg(const Variable& a) {
  return make_result(
      kernels::neg(a.data()), "neg", {a},
      [](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::neg(g)}; },
      [](const Variable& g, const FunctionNode&) { return Grads{neg(g)}; });
}

Variable scale(const Variable& a, double s) {
  return make_result(
      kernels::scale(a.data(), s), "scale", {a},
      [s](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::scale(g, s)}; },
      [s](const Variable& g, const FunctionNode&) { return Grads{scale(g, s)}; });
}

Variable add_scalar(const Variable& a, double s) {
  return make_result(
      kernels::add_scalar(a.data(), s), "add_scalar", {a},
      [](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{g}; },
      [](const Variable& g, const FunctionNode&) { return Grads{g}; });
}

Variable square(const Variable& a) {
  return make_result(
      kernels::square(a.data()), "square", {a},
      [A = a.data()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::mul(g, A), 2.0)};
      },
      [a](const Variable& g, const FunctionNode&) { return Grads{scale(mul(g, a), 2.0)}; });
}

Variable add_bias(const Variable& x, const Variable& bias) {
  return make_result(
      kernels::add_bias(x.data(), bias.data()), "add_bias", {x, bias},
      [](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{g, n.needs_input_grad(1) ? kernels::bias_grad(g) : Tensor()};
      },
      [](const Variable& g, const FunctionNode& n) {
        return Grads{g, n.needs_input_grad(1) ? bias_grad_of(g) : Variable()};
      });
}

}  // namespace tandem
