#include "models/stylegan2.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "kernels/elementwise.h"

namespace tandem::models {

namespace {

constexpr int64_t kChannels7 = 32, kChannels14 = 32, kChannels28 = 16;  // G's, per stage
constexpr double kSlope = 0.2;
const double kGain = std::sqrt(2.0);

// The x with P(N(0, 1) <= x) = p, for p in [0, 1] (infinite at 0 and 1): bisection on the
// normal CDF 0.5 erfc(-x / sqrt 2), to double precision.
double normal_quantile(double p) {
  if (p <= 0) return -std::numeric_limits<double>::infinity();
  if (p >= 1) return std::numeric_limits<double>::infinity();
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace

int64_t stylegan2_stddev_group(int64_t batch) {
  int64_t group = std::min<int64_t>(4, std::max<int64_t>(1, batch));
  while (batch % group != 0) --group;
  return group;
}

StyleGan2Generator::StyleGan2Generator(Generator& gen, int64_t image_channels, double style_mixing)
    : image_channels_(image_channels), style_mixing_(style_mixing) {
  TANDEM_CHECK(
      style_mixing >= 0 && style_mixing <= 1,
      "stylegan2: the style mixing probability (--style-mixing) must lie in [0, 1], got " << style_mixing);
  nn::MappingOptions mapping_options;
  mapping_options.layers = kMappingLayers;
  mapping =
      register_module("mapping", std::make_shared<nn::MappingNetwork>(kLatent, kWDim, mapping_options, gen));
  Tensor c = Tensor::empty({kChannels7, 7, 7});
  fill_normal(c, 0.0, 1.0, gen);
  constant = register_parameter("constant", Variable(c));
  const int64_t ins[] = {kChannels7, kChannels7, kChannels14, kChannels14, kChannels28};
  const int64_t outs[] = {kChannels7, kChannels14, kChannels14, kChannels28, kChannels28};
  for (size_t i = 0; i < 5; ++i) {
    const std::string n = std::to_string(i);
    convs.push_back(register_module(
        "conv" + n, std::make_shared<nn::ModulatedConv2d>(ins[i], outs[i], 3, kWDim,
                                                          nn::ModulatedConvOptions{.bias = false}, gen)));
    noises.push_back(register_module("noise" + n, std::make_shared<nn::NoiseInjection>(gen)));
    biases.push_back(register_parameter("bias" + n, Variable(Tensor::zeros({outs[i]}))));
  }
  for (int64_t in : {kChannels7, kChannels14, kChannels28}) {
    const std::string n = std::to_string(to_rgb.size());
    to_rgb.push_back(register_module(
        "to_rgb" + n, std::make_shared<nn::ModulatedConv2d>(
                          in, image_channels, 1, kWDim, nn::ModulatedConvOptions{.demodulate = false}, gen)));
  }
}

Variable StyleGan2Generator::layer(size_t i, const Variable& x, const Variable& w, const Variable& z,
                                   int64_t& column) {
  Variable h = convs[i]->forward(x, w);
  const int64_t n = h.size(0), side = h.size(2);
  Tensor noise = reshape(slice(z, 1, column, side * side), {n, 1, side, side}).data();
  column += side * side;
  h = noises[i]->forward(h, noise);
  return bias_activation(h, biases[i], kernels::Activation::leaky_relu, kSlope, kGain, conv_clamp);
}

void StyleGan2Generator::check_z(const Variable& z) const {
  TANDEM_CHECK(z.dim() == 2 && z.size(1) == noise_dim(),
               "stylegan2: the generator takes z [N, " << noise_dim() << "] (latent " << kLatent
                                                       << ", the noise of its five noise inputs and the "
                                                          "path-length noise), got "
                                                       << shape_str(z.shape()));
}

Variable StyleGan2Generator::styles(const Variable& z) {
  check_z(z);
  const int64_t n = z.size(0);
  Variable w = mapping->forward(slice(z, 1, 0, kLatent));
  return broadcast_to(reshape(w, {n, 1, kWDim}), {n, kNumWs, kWDim});
}

Tensor StyleGan2Generator::mixing_mask(const Tensor& z, double p) {
  const int64_t n = z.size(0);
  const Variable rows(z);
  const Tensor decide = slice(rows, 1, kMixingColumn + kLatent, 1).data();      // [N, 1]
  const Tensor cutoff = slice(rows, 1, kMixingColumn + kLatent + 1, 1).data();  // [N, 1]
  const Tensor mixed = kernels::compare(
      decide, Tensor::full({1, 1}, normal_quantile(p), z.dtype()).to(z.device()), kernels::Comparison::less);
  // Layer l takes the second w when the cutoff is at most l: u2 <= Phi^-1(l / (L - 1)),
  // never for l = 0, always (when mixed) for l = L - 1.
  std::vector<double> thresholds;
  for (int64_t l = 0; l < kNumWs; ++l) thresholds.push_back(normal_quantile(double(l) / double(kNumWs - 1)));
  const Tensor late =
      kernels::compare(cutoff, Tensor::from_values({1, kNumWs}, thresholds, z.dtype()).to(z.device()),
                       kernels::Comparison::less_equal);
  return kernels::mul(mixed, late).reshape({n, kNumWs, 1});
}

Variable StyleGan2Generator::mixed_styles(const Variable& z) {
  Variable ws = styles(z);
  if (style_mixing_ == 0) return ws;
  const int64_t n = z.size(0);
  Variable w2 = mapping->forward(slice(z, 1, kMixingColumn, kLatent));
  return where(mixing_mask(z.data(), style_mixing_), broadcast_to(reshape(w2, {n, 1, kWDim}), ws.shape()),
               ws);
}

std::vector<Variable> StyleGan2Generator::rgb_outputs(const Variable& ws, const Variable& z) {
  check_z(z);
  const int64_t n = z.size(0);
  TANDEM_CHECK(ws.dim() == 3 && ws.size(0) == n && ws.size(1) == kNumWs && ws.size(2) == kWDim,
               "stylegan2: the synthesis network takes ws [" << n << ", " << kNumWs << ", " << kWDim
                                                             << "], got " << shape_str(ws.shape()));
  auto w = [&](int64_t index) { return reshape(slice(ws, 1, index, 1), {n, kWDim}); };
  int64_t column = kLatent;
  // The constant input, the same for every sample.
  Variable x = broadcast_to(reshape(constant, {1, kChannels7, 7, 7}), {n, kChannels7, 7, 7});
  std::vector<Variable> rgb;
  auto rgb_of = [&](size_t stage, const Variable& h, const Variable& style) {
    Variable y = to_rgb[stage]->forward(h, style);
    rgb.push_back(conv_clamp >= 0 ? clamp(y, -conv_clamp, conv_clamp) : y);
  };
  x = layer(0, x, w(0), z, column);
  rgb_of(0, x, w(1));
  for (int64_t stage = 1; stage < 3; ++stage) {  // StyleGAN2's indices: conv 2s-1, 2s; toRGB 2s+1
    x = upsample2d(x, filter_(x));
    x = layer(static_cast<size_t>(2 * stage - 1), x, w(2 * stage - 1), z, column);
    x = layer(static_cast<size_t>(2 * stage), x, w(2 * stage), z, column);
    rgb_of(static_cast<size_t>(stage), x, w(2 * stage + 1));
  }
  return rgb;
}

Variable StyleGan2Generator::synthesis(const Variable& ws, const Variable& z) {
  std::vector<Variable> rgb = rgb_outputs(ws, z);
  Variable img = rgb[0];
  for (size_t s = 1; s < rgb.size(); ++s) img = add(upsample2d(img, filter_(img)), rgb[s]);
  return img;
}

Variable StyleGan2Generator::forward(const Variable& z) { return synthesis(styles(z), z); }

StyleGan2DBlock::StyleGan2DBlock(Generator& gen, int64_t in_channels, int64_t out_channels) {
  conv0 = register_module("conv0", std::make_shared<nn::EqualizedConv2d>(in_channels, in_channels, 3, 1, 1,
                                                                         nn::EqualizedOptions{}, gen));
  conv1 = register_module("conv1", std::make_shared<nn::EqualizedConv2d>(in_channels, out_channels, 3, 1, 1,
                                                                         nn::EqualizedOptions{}, gen));
  nn::EqualizedOptions no_bias;
  no_bias.bias = false;
  skip = register_module(
      "skip", std::make_shared<nn::EqualizedConv2d>(in_channels, out_channels, 1, 1, 0, no_bias, gen));
}

Variable StyleGan2DBlock::forward(const Variable& x) {
  const nn::StyleGanActivation act{.clamp = conv_clamp};
  const Tensor& f = filter_(x);
  Variable y = skip->forward(downsample2d(x, f));
  Variable h = nn::stylegan_activation(conv0->forward(x), act);
  h = nn::stylegan_activation(conv1->forward(downsample2d(h, f)), act);
  return scale(add(h, y), 1.0 / std::sqrt(2.0));
}

StyleGan2Discriminator::StyleGan2Discriminator(Generator& gen, int64_t image_channels) {
  from_rgb = register_module("from_rgb", std::make_shared<nn::EqualizedConv2d>(image_channels, 16, 1, 1, 0,
                                                                               nn::EqualizedOptions{}, gen));
  block28 = register_module("block28", std::make_shared<StyleGan2DBlock>(gen, 16, 32));
  block14 = register_module("block14", std::make_shared<StyleGan2DBlock>(gen, 32, 32));
  conv = register_module("conv",
                         std::make_shared<nn::EqualizedConv2d>(33, 32, 3, 1, 1, nn::EqualizedOptions{}, gen));
  fc = register_module("fc",
                       std::make_shared<nn::EqualizedLinear>(32 * 7 * 7, 32, nn::EqualizedOptions{}, gen));
  out = register_module("out", std::make_shared<nn::EqualizedLinear>(32, 1, nn::EqualizedOptions{}, gen));
}

Variable StyleGan2Discriminator::forward(const Variable& x) {
  TANDEM_CHECK(x.dim() == 4 && x.size(2) == 28 && x.size(3) == 28,
               "stylegan2: the discriminator takes [N, C, 28, 28], got " << shape_str(x.shape()));
  const nn::StyleGanActivation act, clamped{.clamp = conv_clamp};
  Variable h = nn::stylegan_activation(from_rgb->forward(x), clamped);
  h = block14->forward(block28->forward(h));
  h = nn::minibatch_stddev(h, stylegan2_stddev_group(h.size(0)), 1);
  h = nn::stylegan_activation(conv->forward(h), clamped);
  h = nn::stylegan_activation(fc->forward(flatten(h)), act);  // StyleGAN's fc has no clamp
  return out->forward(h);
}

void StyleGan2Discriminator::set_conv_clamp(double clamp) {
  conv_clamp = block28->conv_clamp = block14->conv_clamp = clamp;
}

StyleGan2::StyleGan2(Generator& gen, int64_t image_channels, double style_mixing, double conv_clamp)
    : image_channels_(image_channels) {
  g_ = register_module("generator", std::make_shared<StyleGan2Generator>(gen, image_channels, style_mixing));
  d_ = register_module("discriminator", std::make_shared<StyleGan2Discriminator>(gen, image_channels));
  g_->conv_clamp = conv_clamp;
  d_->set_conv_clamp(conv_clamp);
  generator = g_;
  discriminator = d_;
  path_length_mean_ = &register_buffer("path_length_mean", Tensor::zeros({}, DType::f64));
}

std::vector<GanModel::ResolutionLayer> StyleGan2::resolution_layers() {
  constexpr int64_t kConvSides[] = {7, 14, 14, 28, 28}, kRgbSides[] = {7, 14, 28};
  std::vector<ResolutionLayer> layers;
  for (size_t i = 0; i < g_->convs.size(); ++i) layers.push_back({kConvSides[i], g_->convs[i].get()});
  for (size_t i = 0; i < g_->to_rgb.size(); ++i) layers.push_back({kRgbSides[i], g_->to_rgb[i].get()});
  for (nn::Module* layer : std::initializer_list<nn::Module*>{d_->from_rgb.get(), d_->block28.get()})
    layers.push_back({28, layer});
  layers.push_back({14, d_->block14.get()});
  for (nn::Module* layer : std::initializer_list<nn::Module*>{d_->conv.get(), d_->fc.get(), d_->out.get()})
    layers.push_back({7, layer});
  return layers;
}

GanModel::StyledImages StyleGan2::generate_styled(const Variable& z) {
  StyledImages out;
  out.ws = g_->mixed_styles(z);
  out.images = g_->synthesis(out.ws, z);
  const int64_t n = z.size(0), begin = StyleGan2Generator::kInputNoiseDim;
  out.path_noise = slice(z, 1, begin, g_->noise_dim() - begin).data().reshape({n, image_channels_, 28, 28});
  out.path_mean = *path_length_mean_;
  return out;
}

}  // namespace tandem::models
