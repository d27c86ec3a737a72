#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// The gradient of add_bias for the bias, as Variable ops: sum over every axis but 1.
Variable bias_grad_of(Variable g) {
  while (g.dim() > 2) g = sum(g, g.dim() - 1);
  return sum(g, 0);
}

}  // namespace

Variable add(const Variable& a, const Variable& b) {
  return make_result(
      kernels::add(a.data(), b.data()), "add", {a, b},
      [](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{g, g};
      },
      [](const Variable& g, const FunctionNode&) {
        return Grads{g, g};
      });
}

Variable sub(const Variable& a, const Variable& b) {
  return make_result(
      kernels::sub(a.data(), b.data()), "sub", {a, b},
      [](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{g, n.needs_input_grad(1) ? kernels::neg(g) : Tensor()};
      },
      [](const Variable& g, const FunctionNode& n) {
        return Grads{g, n.needs_input_grad(1) ? neg(g) : Variable()};
      });
}

Variable mul(const Variable& a, const Variable& b) {
  return make_result(
      kernels::mul(a.data(), b.data()), "mul", {a, b},
      [A = a.data(), B = b.data()](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{n.needs_input_grad(0) ? kernels::mul(g, B) : Tensor(),
                                   n.needs_input_grad(1) ? kernels::mul(g, A) : Tensor()};
      },
      [a, b](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? mul(g, b) : Variable(),
                     n.needs_input_grad(1) ? mul(g, a) : Variable()};
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
