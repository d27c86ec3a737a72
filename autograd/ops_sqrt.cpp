#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// 1/y where y > 0 and 0 where y == 0, from existing kernels (so it runs on every device):
// with m = [y > 0], m / (y + 1 - m).
Tensor reciprocal_or_zero_data(const Tensor& y) {
  Tensor m = kernels::relu_backward(Tensor::ones(y.shape(), y.dtype(), y.device()), y);
  return kernels::div(m, kernels::add(y, kernels::add_scalar(kernels::neg(m), 1.0)));
}

// r(y) = 1/y for y > 0, 0 at y == 0; dr/dy = -r^2 (also 0 at 0).
Variable reciprocal_or_zero(const Variable& y) {
  Tensor r = reciprocal_or_zero_data(y.data());
  return make_result(
      r, "reciprocal_or_zero", {y},
      [r](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::neg(kernels::mul(g, kernels::square(r)))};
      },
      [y](const Variable& g, const FunctionNode&) {
        return Grads{neg(mul(g, square(reciprocal_or_zero(y))))};
      });
}

}  // namespace

// d sqrt(x)/dx = 1 / (2 sqrt(x)) for x > 0, and 0 at x == 0 by definition (see ops.h).
Variable sqrt(const Variable& x) {
  Tensor y = kernels::sqrt(x.data());
  return make_result(
      y, "sqrt", {x},
      [y](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::mul(g, reciprocal_or_zero_data(y)), 0.5)};
      },
      [x](const Variable& g, const FunctionNode&) {
        return Grads{scale(mul(g, reciprocal_or_zero(sqrt(x))), 0.5)};
      });
}

}  // namespace tandem
