// Along one axis: max/min with their positions, logsumexp, log_softmax and softmax, and the
// classification losses nll_loss and cross_entropy (ops.h). max/min are a gather at
// argmax's positions, whose gradient is the matching scatter (each the other's adjoint, so
// every order is exact); the rest are built from ops with rules of their own, with the
// usual shift by the (constant) maximum that keeps exp from overflowing.
#include <cmath>
#include <limits>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/axis_layout.h"
#include "kernels/axis_select.h"
#include "kernels/elementwise.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

Variable scatter_axis(const Variable& grad, const Shape& shape, int64_t axis, const Tensor& index);

// x's values at `index` along `axis` (normalised), index in keepdim form.
Variable gather_axis(const Variable& x, int64_t axis, const Tensor& index) {
  const Shape shape = x.shape();
  return make_result(
      kernels::gather_axis(x.data(), axis, index), "gather_axis", {x},
      [shape, axis, index](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::scatter_axis(g, shape, axis, index)};
      },
      [shape, axis, index](const Variable& g, const FunctionNode&) {
        return Grads{scatter_axis(g, shape, axis, index)};
      });
}

Variable scatter_axis(const Variable& grad, const Shape& shape, int64_t axis, const Tensor& index) {
  return make_result(
      kernels::scatter_axis(grad.data(), shape, axis, index), "scatter_axis", {grad},
      [axis, index](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::gather_axis(g, axis, index)};
      },
      [axis, index](const Variable& g, const FunctionNode&) { return Grads{gather_axis(g, axis, index)}; });
}

// `x` (keepdim form) without its `axis`, unless keepdim.
Variable drop_axis(const Variable& x, int64_t axis, bool keepdim) {
  if (keepdim) return x;
  Shape shape = x.shape();
  shape.erase(shape.begin() + axis);
  return reshape(x, shape);
}

AxisExtreme extreme(const char* op, const Variable& x, int64_t axis, bool keepdim, bool largest) {
  TANDEM_CHECK(x.defined(), op << ": the input is undefined");
  const int64_t a = kernels::axis_detail::normalize_axis(op, x.shape(), axis);
  Tensor index = largest ? kernels::argmax_axis(x.data(), a, true) : kernels::argmin_axis(x.data(), a, true);
  Variable values = drop_axis(gather_axis(x, a, index), a, keepdim);
  if (!keepdim) index = index.view(values.shape());
  return {values, index};
}

// The maximum along `axis` (keepdim form) as a constant, 0 where it is not finite (an all
// -inf row: exp(x - 0) is then 0 and the log -inf, as it should be).
Tensor finite_shift(const Tensor& x, int64_t axis) {
  const Tensor m = kernels::gather_axis(x, axis, kernels::argmax_axis(x, axis, true));
  const Tensor limit =
      Tensor::full(m.shape(), std::numeric_limits<double>::infinity(), m.dtype(), m.device());
  const Tensor finite = kernels::compare(kernels::abs(m), limit, kernels::Comparison::less);
  return kernels::where(finite, m, Tensor::zeros(m.shape(), m.dtype(), m.device()));
}

void check_classification(const char* op, const Variable& scores, const Tensor& target) {
  TANDEM_CHECK(
      scores.defined() && scores.dim() == 2,
      op << ": needs [N, C] scores, got " << (scores.defined() ? shape_str(scores.shape()) : "undefined"));
  check_defined(op, target, "target");
  TANDEM_CHECK(target.dtype() == DType::i64 && target.dim() == 1 && target.size(0) == scores.size(0),
               op << ": needs int64 targets [" << scores.size(0) << "] for scores "
                  << shape_str(scores.shape()) << ", got " << target.str());
  check_same_device(op, scores.data(), target);
  // On a GPU the targets are read back for this check (a host wait): labels usually come
  // from the host, where reading them is free.
  const Tensor host = target.device().is_cpu() ? target : target.to(Device::cpu());
  const int64_t* p = host.data<int64_t>();
  for (int64_t i = 0; i < host.numel(); ++i)
    TANDEM_CHECK(p[i] >= 0 && p[i] < scores.size(1), op << ": target " << p[i] << " (row " << i
                                                        << ") is not a class of [0, " << scores.size(1)
                                                        << ")");
}

Variable reduce(const Variable& per_row, Reduction reduction) {
  switch (reduction) {
    case Reduction::mean:
      return mean(per_row);
    case Reduction::sum:
      return sum(per_row);
    case Reduction::none:
      return per_row;
  }
  return per_row;
}

// -log p[target] per row, from log-probabilities [N, C].
Variable picked_nll(const Variable& log_probs, const Tensor& target) {
  const Tensor index = target.view({target.size(0), 1});
  return neg(reshape(gather_axis(log_probs, 1, index), {target.size(0)}));
}

}  // namespace

AxisExtreme max(const Variable& x, int64_t axis, bool keepdim) {
  return extreme("max", x, axis, keepdim, true);
}
AxisExtreme min(const Variable& x, int64_t axis, bool keepdim) {
  return extreme("min", x, axis, keepdim, false);
}

Variable logsumexp(const Variable& x, int64_t axis, bool keepdim) {
  TANDEM_CHECK(x.defined(), "logsumexp: the input is undefined");
  const int64_t a = kernels::axis_detail::normalize_axis("logsumexp", x.shape(), axis);
  const Variable shift(finite_shift(x.data(), a));
  const Variable out = add(log(sum(exp(sub(x, shift)), a, true)), shift);
  return drop_axis(out, a, keepdim);
}

Variable log_softmax(const Variable& x, int64_t axis) { return sub(x, logsumexp(x, axis, true)); }

Variable softmax(const Variable& x, int64_t axis) { return exp(log_softmax(x, axis)); }

Variable nll_loss(const Variable& log_probs, const Tensor& target, Reduction reduction) {
  check_classification("nll_loss", log_probs, target);
  return reduce(picked_nll(log_probs, target), reduction);
}

Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& options) {
  check_classification("cross_entropy", logits, target);
  const double eps = options.label_smoothing;
  TANDEM_CHECK(eps >= 0.0 && eps <= 1.0, "cross_entropy: label_smoothing " << eps << " is not in [0, 1]");
  const Variable log_probs = log_softmax(logits, 1);
  Variable per_row = picked_nll(log_probs, target);
  // PyTorch's smoothing: the target distribution (1 - eps) one_hot + eps / C.
  if (eps > 0.0) per_row = add(scale(per_row, 1.0 - eps), scale(neg(mean(log_probs, 1)), eps));
  return reduce(per_row, options.reduction);
}

}  // namespace tandem
