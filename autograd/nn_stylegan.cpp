#include "autograd/nn_stylegan.h"

#include <cmath>

namespace tandem::nn {

namespace {

void check_positive(const char* layer, const char* what, int64_t value) {
  TANDEM_CHECK(value > 0, layer << ": " << what << " must be positive, got " << value);
}

void check_options(const char* layer, const EqualizedOptions& o) {
  TANDEM_CHECK(o.lr_multiplier > 0 && std::isfinite(o.lr_multiplier),
               layer << ": lr_multiplier must be a positive number, got " << o.lr_multiplier);
  TANDEM_CHECK(std::isfinite(o.gain) && std::isfinite(o.bias_init),
               layer << ": gain and bias_init must be finite numbers");
}

// The stored weight ~ N(0, 1 / lr_multiplier^2), the bias bias_init.
void equalized_init(Module& m, Variable& weight, Variable& bias, const Shape& shape, int64_t out,
                    const EqualizedOptions& o, Generator& gen) {
  Tensor w = Tensor::empty(shape);
  fill_normal(w, 0.0, 1.0 / o.lr_multiplier, gen);
  weight = m.register_parameter("weight", Variable(w));
  if (o.bias) bias = m.register_parameter("bias", Variable(Tensor::full({out}, o.bias_init)));
}

Variable scaled_bias(const Variable& bias, const EqualizedOptions& o) {
  return bias.defined() ? scale(bias, o.lr_multiplier) : Variable();
}

}  // namespace

EqualizedLinear::EqualizedLinear(int64_t in, int64_t out, EqualizedOptions o, Generator& gen)
    : in_features(in), out_features(out), options(o) {
  check_positive("EqualizedLinear", "in_features", in);
  check_positive("EqualizedLinear", "out_features", out);
  check_options("EqualizedLinear", o);
  equalized_init(*this, weight, bias, {out, in}, out, o, gen);
}

Variable EqualizedLinear::forward(const Variable& x) {
  const double c = options.gain * options.lr_multiplier / std::sqrt(static_cast<double>(in_features));
  return linear(x, scale(weight, c), scaled_bias(bias, options));
}

std::string EqualizedLinear::type_name() const {
  return "EqualizedLinear(" + std::to_string(in_features) + ", " + std::to_string(out_features) + ")";
}

EqualizedConv2d::EqualizedConv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding,
                                 EqualizedOptions o, Generator& gen)
    : in_channels(in), out_channels(out), kernel(k), params{stride, padding, 0}, options(o) {
  check_positive("EqualizedConv2d", "in_channels", in);
  check_positive("EqualizedConv2d", "out_channels", out);
  check_positive("EqualizedConv2d", "kernel", k);
  check_positive("EqualizedConv2d", "stride", stride);
  TANDEM_CHECK(padding >= 0, "EqualizedConv2d: padding must be >= 0, got " << padding);
  check_options("EqualizedConv2d", o);
  equalized_init(*this, weight, bias, {out, in, k, k}, out, o, gen);
}

Variable EqualizedConv2d::forward(const Variable& x) {
  const double c =
      options.gain * options.lr_multiplier / std::sqrt(static_cast<double>(in_channels * kernel * kernel));
  return conv2d(x, scale(weight, c), scaled_bias(bias, options), params);
}

std::string EqualizedConv2d::type_name() const {
  return "EqualizedConv2d(" + std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", " +
         std::to_string(kernel) + ")";
}

Variable pixel_norm(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() >= 2,
               "pixel_norm: needs [N, C, ...], got " << (x.defined() ? shape_str(x.shape()) : "undefined"));
  return div(x, sqrt(add_scalar(mean(square(x), 1, true), 1e-8)));
}

Variable minibatch_stddev(const Variable& x, int64_t group_size, int64_t num_channels) {
  TANDEM_CHECK(x.defined() && x.dim() == 4, "minibatch_stddev: needs [N, C, H, W], got "
                                                << (x.defined() ? shape_str(x.shape()) : "undefined"));
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  TANDEM_CHECK(group_size > 0 && num_channels > 0 && c % num_channels == 0,
               "minibatch_stddev: group_size " << group_size << " and num_channels " << num_channels
                                               << " (must divide the " << c << " channels) must be positive");
  const int64_t g = std::min(group_size, n);
  TANDEM_CHECK(n % g == 0, "minibatch_stddev: a batch of " << n << " does not split into groups of " << g);
  const int64_t groups = n / g, f = num_channels;
  const Variable y = reshape(x, {g, groups, f, c / f, h, w});  // member j of group m is sample j * groups + m
  const Variable centred = sub(y, mean(y, 0, true));
  const Variable std_dev = sqrt(add_scalar(mean(square(centred), 0), 1e-8));  // [groups, f, c/f, h, w]
  const Variable per_group = mean(reshape(std_dev, {groups, f, (c / f) * h * w}), 2);  // [groups, f]
  const Variable tiled = broadcast_to(reshape(per_group, {1, groups, f, 1, 1}), {g, groups, f, h, w});
  return concat({x, reshape(tiled, {n, f, h, w})}, 1);
}

NoiseInjection::NoiseInjection(Generator& gen) : gen_(&gen) {
  strength = register_parameter("strength", Variable(Tensor::zeros({1})));
}

Variable NoiseInjection::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() == 4, "NoiseInjection: needs [N, C, H, W], got " << shape_str(x.shape()));
  Tensor noise = Tensor::empty({x.size(0), 1, x.size(2), x.size(3)}, x.dtype());
  fill_normal(noise, 0.0, 1.0, *gen_);
  return forward(x, x.device().is_cpu() ? noise : noise.to(x.device()));
}

Variable NoiseInjection::forward(const Variable& x, const Tensor& noise) {
  TANDEM_CHECK(x.dim() == 4 && noise.shape() == Shape({x.size(0), 1, x.size(2), x.size(3)}),
               "NoiseInjection: noise " << shape_str(noise.shape()) << " for input " << shape_str(x.shape())
                                        << " (want [N, 1, H, W])");
  return add(x, mul(Variable(noise), reshape(strength, {1, 1, 1, 1})));
}

}  // namespace tandem::nn
