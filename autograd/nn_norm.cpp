#include "autograd/nn_norm.h"

#include <sstream>

#include "autograd/ops.h"

namespace tandem::nn {

namespace {

int64_t product(const Shape& shape, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= shape[i];
  return p;
}

// weight (and bias) of `shape` applied to x, whose axes from `axis` on are `shape` followed
// by `trailing` axes of any size: weight viewed as shape + [1] * trailing broadcasts.
Variable affine(const Variable& x, const Variable& weight, const Variable& bias, size_t trailing) {
  if (!weight.defined()) return x;
  Shape view = weight.shape();
  view.insert(view.end(), trailing, 1);
  return add(mul(x, reshape(weight, view)), reshape(bias, view));
}

// x [M, K] normalised along axis 1: (x - mean) / sqrt(var + eps), var biased.
Variable normalize_rows(const Variable& x, double eps) {
  const Variable centred = sub(x, mean(x, 1, true));
  const Variable var = mean(square(centred), 1, true);
  return div(centred, sqrt(add_scalar(var, eps)));
}

}  // namespace

Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias,
                    double eps) {
  TANDEM_CHECK(x.defined() && x.dim() >= 2 && num_groups > 0 && x.size(1) % num_groups == 0,
               "group_norm: needs [N, C, ...] with C divisible by "
                   << num_groups << " groups, got " << (x.defined() ? shape_str(x.shape()) : "undefined"));
  const Shape shape = x.shape();
  const Variable rows = reshape(x, {shape[0] * num_groups, product(shape, 1, shape.size()) / num_groups});
  return affine(reshape(normalize_rows(rows, eps), shape), weight, bias, shape.size() - 2);
}

Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                    const Variable& bias, double eps) {
  TANDEM_CHECK(x.defined(), "layer_norm: the input is undefined");
  const Shape shape = x.shape();
  const size_t k = normalized_shape.size();
  const bool fits = k > 0 && shape.size() > k &&
                    Shape(shape.end() - static_cast<std::ptrdiff_t>(k), shape.end()) == normalized_shape;
  TANDEM_CHECK(fits, "layer_norm: the last axes of " << shape_str(shape) << " are not "
                                                     << shape_str(normalized_shape));
  const int64_t per_sample = product(normalized_shape, 0, k);
  const Variable rows = reshape(x, {x.numel() / per_sample, per_sample});
  return affine(reshape(normalize_rows(rows, eps), shape), weight, bias, 0);
}

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps_, bool affine_)
    : num_groups(groups), num_channels(channels), eps(eps_) {
  TANDEM_CHECK(groups > 0 && channels > 0 && channels % groups == 0,
               "GroupNorm: " << channels << " channels do not split into " << groups << " groups");
  TANDEM_CHECK(eps > 0, "GroupNorm: eps " << eps << " must be positive");
  if (affine_) {
    weight = register_parameter("weight", Variable(Tensor::ones({channels})));
    bias = register_parameter("bias", Variable(Tensor::zeros({channels})));
  }
}

Variable GroupNorm::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() >= 2 && x.size(1) == num_channels,
               type_name() << ": needs [N, " << num_channels << ", ...], got " << shape_str(x.shape()));
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::type_name() const {
  return "GroupNorm(" + std::to_string(num_groups) + ", " + std::to_string(num_channels) + ")";
}

InstanceNorm2d::InstanceNorm2d(int64_t channels, double eps_, bool affine_)
    : GroupNorm(channels, channels, eps_, affine_) {}

Variable InstanceNorm2d::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() == 4,
               type_name() << ": needs [N, " << num_channels << ", H, W], got " << shape_str(x.shape()));
  return GroupNorm::forward(x);
}

std::string InstanceNorm2d::type_name() const {
  return "InstanceNorm2d(" + std::to_string(num_channels) + ")";
}

LayerNorm::LayerNorm(Shape shape, double eps_, bool elementwise_affine)
    : normalized_shape(std::move(shape)), eps(eps_) {
  TANDEM_CHECK(!normalized_shape.empty() && product(normalized_shape, 0, normalized_shape.size()) > 0,
               "LayerNorm: normalized_shape " << shape_str(normalized_shape) << " is empty");
  TANDEM_CHECK(eps > 0, "LayerNorm: eps " << eps << " must be positive");
  if (elementwise_affine) {
    weight = register_parameter("weight", Variable(Tensor::ones(normalized_shape)));
    bias = register_parameter("bias", Variable(Tensor::zeros(normalized_shape)));
  }
}

Variable LayerNorm::forward(const Variable& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::type_name() const { return "LayerNorm(" + shape_str(normalized_shape) + ")"; }

}  // namespace tandem::nn
