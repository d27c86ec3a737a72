// exp, log, pow, abs, clamp, maximum, minimum and where (ops.h), each with a first-order
// rule on tensors and a second-order rule built from ops that have rules themselves.
// Where a gradient is masked (clamp outside its bounds, the smaller operand of maximum,
// where's unchosen side) the masked elements are 0 by selection, not by multiplication, so
// an infinite incoming gradient does not become NaN there.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/broadcast.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;
using kernels::Comparison;

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype(), t.device()); }

// g where `mask` is non-zero, else 0.
Tensor masked(const Tensor& g, const Tensor& mask) { return kernels::where(mask, g, zeros_like(g)); }
Variable masked(const Variable& g, const Tensor& mask) {
  return where(mask, g, Variable(zeros_like(g.data())));
}

// g * weight where weight is non-zero, else 0 (weights 0, 0.5 or 1: maximum's and minimum's).
Tensor weighted(const Tensor& g, const Tensor& weight) { return masked(kernels::mul(g, weight), weight); }
Variable weighted(const Variable& g, const Tensor& weight) {
  return masked(mul(g, Variable(weight)), weight);
}

// x repeated to `shape` (x itself when it has that shape): its gradient is summed back.
Variable to_shape(const Variable& x, const Shape& shape) {
  return x.shape() == shape ? x : broadcast_to(x, shape);
}
Tensor to_shape(const Tensor& x, const Shape& shape) {
  return x.shape() == shape ? x : kernels::broadcast_to(x, shape);
}

// maximum (keep = greater) and minimum (keep = less): the gradient goes to the operand
// that was taken, split evenly between equal operands (PyTorch's convention).
Variable extremum(const char* name, const Variable& a0, const Variable& b0, Comparison keep) {
  TANDEM_CHECK(a0.defined() && b0.defined(), name << ": an operand is undefined");
  const Shape shape = kernels::broadcast_shape(name, a0.shape(), b0.shape());
  const Variable a = to_shape(a0, shape), b = to_shape(b0, shape);
  const Tensor& A = a.data();
  const Tensor& B = b.data();
  Tensor out = keep == Comparison::greater ? kernels::maximum(A, B) : kernels::minimum(A, B);
  const Tensor half_ties = kernels::scale(kernels::compare(A, B, Comparison::equal), 0.5);
  const Tensor wa = kernels::add(kernels::compare(A, B, keep), half_ties);
  const Tensor wb = kernels::add(kernels::compare(B, A, keep), half_ties);
  return make_result(
      std::move(out), name, {a, b},
      [wa, wb](const Tensor& g, const FunctionNode& n) {
        return std::vector<Tensor>{n.needs_input_grad(0) ? weighted(g, wa) : Tensor(),
                                   n.needs_input_grad(1) ? weighted(g, wb) : Tensor()};
      },
      [wa, wb](const Variable& g, const FunctionNode& n) {
        return Grads{n.needs_input_grad(0) ? weighted(g, wa) : Variable(),
                     n.needs_input_grad(1) ? weighted(g, wb) : Variable()};
      });
}

}  // namespace

Variable exp(const Variable& x) {
  Tensor out = kernels::exp(x.data());
  return make_result(
      out, "exp", {x},
      [y = out](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::mul(g, y)}; },
      [x](const Variable& g, const FunctionNode&) { return Grads{mul(g, exp(x))}; });
}

Variable log(const Variable& x) {
  return make_result(
      kernels::log(x.data()), "log", {x},
      [X = x.data()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::div(g, X)};
      },
      [x](const Variable& g, const FunctionNode&) { return Grads{div(g, x)}; });
}

// d x^p = p x^(p-1); 0 for p == 0 (x^0 is 1 everywhere, also at 0).
Variable pow(const Variable& x, double p) {
  return make_result(
      kernels::pow_scalar(x.data(), p), "pow", {x},
      [X = x.data(), p](const Tensor& g, const FunctionNode&) {
        if (p == 0.0) return std::vector<Tensor>{zeros_like(g)};
        return std::vector<Tensor>{kernels::mul(g, kernels::scale(kernels::pow_scalar(X, p - 1.0), p))};
      },
      [x, p](const Variable& g, const FunctionNode&) {
        if (p == 0.0) return Grads{Variable(zeros_like(g.data()))};
        return Grads{mul(g, scale(pow(x, p - 1.0), p))};
      });
}

// d|x| = sign(x), 0 at x == 0 (the subgradient PyTorch takes); sign is piecewise constant.
Variable abs(const Variable& x) {
  const Tensor s = kernels::sign(x.data());
  return make_result(
      kernels::abs(x.data()), "abs", {x},
      [s](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{kernels::mul(g, s)}; },
      [s](const Variable& g, const FunctionNode&) { return Grads{mul(g, Variable(s))}; });
}

// The gradient passes where lo <= x <= hi (at a bound too, as PyTorch's) and is 0 elsewhere.
Variable clamp(const Variable& x, double lo, double hi) {
  Tensor out = kernels::clamp(x.data(), lo, hi);
  const Tensor inside = kernels::clamp_mask(x.data(), lo, hi);
  return make_result(
      std::move(out), "clamp", {x},
      [inside](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{masked(g, inside)}; },
      [inside](const Variable& g, const FunctionNode&) { return Grads{masked(g, inside)}; });
}

Variable maximum(const Variable& a, const Variable& b) {
  return extremum("maximum", a, b, Comparison::greater);
}
Variable minimum(const Variable& a, const Variable& b) { return extremum("minimum", a, b, Comparison::less); }

Variable where(const Tensor& condition0, const Variable& a0, const Variable& b0) {
  const char* name = "where";
  check_defined(name, condition0, "condition");
  TANDEM_CHECK(a0.defined() && b0.defined(), name << ": a choice is undefined");
  const Shape shape = kernels::broadcast_shape(name, condition0.shape(),
                                               kernels::broadcast_shape(name, a0.shape(), b0.shape()));
  const Tensor condition = to_shape(condition0, shape);
  const Variable a = to_shape(a0, shape), b = to_shape(b0, shape);
  return make_result(
      kernels::where(condition, a.data(), b.data()), name, {a, b},
      [condition](const Tensor& g, const FunctionNode& n) {
        const Tensor zero = zeros_like(g);
        return std::vector<Tensor>{n.needs_input_grad(0) ? kernels::where(condition, g, zero) : Tensor(),
                                   n.needs_input_grad(1) ? kernels::where(condition, zero, g) : Tensor()};
      },
      [condition](const Variable& g, const FunctionNode& n) {
        const Variable zero(zeros_like(g.data()));
        return Grads{n.needs_input_grad(0) ? where(condition, g, zero) : Variable(),
                     n.needs_input_grad(1) ? where(condition, zero, g) : Variable()};
      });
}

}  // namespace tandem
