#include "autograd/nn_stylegan.h"

#include <cmath>
#include <memory>

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
  const PrecisionScope precision = precision_scope();
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
  const PrecisionScope precision = precision_scope();
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

namespace {

Generator seeded_from(Generator& gen) {
  const auto block = gen.next_block();
  return Generator(uint64_t{block[0]} << 32 | block[1]);
}

}  // namespace

NoiseInjection::NoiseInjection(Generator& gen) : gen_(seeded_from(gen)) {
  strength = register_parameter("strength", Variable(Tensor::zeros({1})));
}

Variable NoiseInjection::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() == 4, "NoiseInjection: needs [N, C, H, W], got " << shape_str(x.shape()));
  Tensor noise = Tensor::empty({x.size(0), 1, x.size(2), x.size(3)}, x.dtype());
  fill_normal(noise, 0.0, 1.0, gen_);
  return forward(x, x.device().is_cpu() ? noise : noise.to(x.device()));
}

Variable NoiseInjection::forward(const Variable& x, const Tensor& noise) {
  TANDEM_CHECK(x.dim() == 4 && noise.shape() == Shape({x.size(0), 1, x.size(2), x.size(3)}),
               "NoiseInjection: noise " << shape_str(noise.shape()) << " for input " << shape_str(x.shape())
                                        << " (want [N, 1, H, W])");
  return add(x, mul(Variable(noise), reshape(strength, {1, 1, 1, 1})));
}

Variable modulated_conv2d(const Variable& x, const Variable& weight, const Variable& styles, bool demodulate,
                          const kernels::Conv2dParams& params, ModulatedForm form) {
  const char* op = "modulated_conv2d";
  TANDEM_CHECK(x.defined() && weight.defined() && styles.defined(),
               op << ": needs defined input, weight and styles");
  TANDEM_CHECK(x.dim() == 4 && weight.dim() == 4 && styles.dim() == 2,
               op << ": needs x [N, C, H, W], weight [O, C, k, k] and styles [N, C], got "
                  << shape_str(x.shape()) << ", " << shape_str(weight.shape()) << " and "
                  << shape_str(styles.shape()));
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  TANDEM_CHECK(weight.size(1) == c && styles.size(0) == n && styles.size(1) == c,
               op << ": x " << shape_str(x.shape()) << ", weight " << shape_str(weight.shape())
                  << " and styles " << shape_str(styles.shape())
                  << " do not agree (want [N, C, H, W], [O, C, k, k], [N, C])");
  TANDEM_CHECK(params.groups == 1,
               op << ": params.groups must be 1 (the batch's samples are the groups), got " << params.groups);
  if (form == ModulatedForm::scaled) {
    Variable y = conv2d(mul(x, reshape(styles, {n, c, 1, 1})), weight, Variable(), params);
    if (!demodulate) return y;
    // sum over c, ki, kj of (weight[o, c] styles[n, c])^2 = styles^2 @ (sum over ki, kj of weight^2)^T.
    const Variable energy = sum(square(reshape(weight, {o, c, kh * kw})), 2);  // [O, C]
    const PrecisionScope reduction(DType::f32);  // demodulation coefficients: a reduction, in float32
    const Variable norms = sqrt(add_scalar(matmul(square(styles), energy, false, true), 1e-8));  // [N, O]
    return div(y, reshape(norms, {n, o, 1, 1}));
  }
  // w_n[o, c, ki, kj] = weight[o, c, ki, kj] * styles[n, c], as [N, O, C k k].
  Variable w = mul(reshape(weight, {1, o, c, kh * kw}), reshape(styles, {n, 1, c, 1}));
  w = reshape(w, {n, o, c * kh * kw});
  if (demodulate) w = div(w, sqrt(add_scalar(sum(square(w), 2, true), 1e-8)));
  kernels::Conv2dParams p = params;
  p.groups = n;
  const Variable y =
      conv2d(reshape(x, {1, n * c, x.size(2), x.size(3)}), reshape(w, {n * o, c, kh, kw}), Variable(), p);
  return reshape(y, {n, o, y.size(2), y.size(3)});
}

ModulatedConv2d::ModulatedConv2d(int64_t in, int64_t out, int64_t k, int64_t w_dim_, ModulatedConvOptions o,
                                 Generator& gen)
    : in_channels(in), out_channels(out), kernel(k), w_dim(w_dim_), options(o) {
  check_positive("ModulatedConv2d", "in_channels", in);
  check_positive("ModulatedConv2d", "out_channels", out);
  check_positive("ModulatedConv2d", "kernel", k);
  check_positive("ModulatedConv2d", "w_dim", w_dim_);
  TANDEM_CHECK(std::isfinite(o.gain), "ModulatedConv2d: gain must be a finite number, got " << o.gain);
  affine = register_module(
      "affine", std::make_shared<EqualizedLinear>(w_dim_, in, EqualizedOptions{.bias_init = 1.0}, gen));
  Tensor wt = Tensor::empty({out, in, k, k});
  fill_normal(wt, 0.0, 1.0, gen);
  weight = register_parameter("weight", Variable(wt));
  if (o.bias) bias = register_parameter("bias", Variable(Tensor::zeros({out})));
}

Variable ModulatedConv2d::forward(const Variable& x, const Variable& w) {
  const double c = options.gain / std::sqrt(static_cast<double>(in_channels * kernel * kernel));
  const ModulatedForm form =
      options.form.value_or(is_training() ? ModulatedForm::scaled : ModulatedForm::grouped);
  const Variable styles = affine->forward(w);
  const PrecisionScope precision = precision_scope();
  const Variable y =
      modulated_conv2d(x, scale(weight, c), styles, options.demodulate, {.padding = kernel / 2}, form);
  return bias.defined() ? add_bias(y, bias) : y;
}

std::string ModulatedConv2d::type_name() const {
  return "ModulatedConv2d(" + std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", " +
         std::to_string(kernel) + (options.demodulate ? "" : ", demodulate=false") + ")";
}

}  // namespace tandem::nn
