#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// The broadcasts that sum and sum-over-axis use in backward, as differentiable ops (their
// own backward is the sum they undo), so the reductions have second-order rules.
Variable expand_scalar(const Variable& g, const Shape& shape) {
  return make_result(
      kernels::expand_scalar(g.data(), shape), "expand_scalar", {g},
      [](const Tensor& gg, const FunctionNode&) { return std::vector<Tensor>{kernels::sum_all(gg)}; },
      [](const Variable& gg, const FunctionNode&) { return Grads{sum(gg)}; });
}

// g has `shape` with `axis` reduced (kept as size 1 or dropped).
Variable expand_axis(const Variable& g, const Shape& shape, int64_t axis) {
  bool keepdim = g.dim() == static_cast<int64_t>(shape.size());
  return make_result(
      kernels::expand_axis(g.data(), shape, axis), "expand_axis", {g},
      [axis, keepdim](const Tensor& gg, const FunctionNode&) {
        return std::vector<Tensor>{kernels::sum_axis(gg, axis, keepdim)};
      },
      [axis, keepdim](const Variable& gg, const FunctionNode&) { return Grads{sum(gg, axis, keepdim)}; });
}

}  // namespace

Variable sum(const Variable& x) {
  return make_result(
      kernels::sum_all(x.data()), "sum", {x},
      [shape = x.shape()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::expand_scalar(g, shape)};
      },
      [shape = x.shape()](const Variable& g, const FunctionNode&) { return Grads{expand_scalar(g, shape)}; });
}

Variable mean(const Variable& x) {
  return make_result(
      kernels::mean_all(x.data()), "mean", {x},
      [shape = x.shape(), n = x.numel()](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::expand_scalar(g, shape), 1.0 / double(n))};
      },
      [shape = x.shape(), n = x.numel()](const Variable& g, const FunctionNode&) {
        return Grads{scale(expand_scalar(g, shape), 1.0 / double(n))};
      });
}

Variable sum(const Variable& x, int64_t axis, bool keepdim) {
  return make_result(
      kernels::sum_axis(x.data(), axis, keepdim), "sum_axis", {x},
      [shape = x.shape(), axis](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::expand_axis(g, shape, axis)};
      },
      [shape = x.shape(), axis](const Variable& g, const FunctionNode&) {
        return Grads{expand_axis(g, shape, axis)};
      });
}

Variable mean(const Variable& x, int64_t axis, bool keepdim) {
  return make_result(
      kernels::mean_axis(x.data(), axis, keepdim), "mean_axis", {x},
      [shape = x.shape(), axis, n = x.size(axis)](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scale(kernels::expand_axis(g, shape, axis), 1.0 / double(n))};
      },
      [shape = x.shape(), axis, n = x.size(axis)](const Variable& g, const FunctionNode&) {
        return Grads{scale(expand_axis(g, shape, axis), 1.0 / double(n))};
      });
}

}  // namespace tandem
