#include "models/r3gan.h"

#include <cmath>

#include "autograd/init.h"
#include "autograd/ops.h"

namespace tandem::models {

namespace {

constexpr double kSlope = 0.2;
// Widths by resolution: 7x7, 14x14, 28x28 (G; D the reverse).
constexpr int64_t kWidths[3] = {64, 32, 16};
constexpr int64_t kBlocksPerPart = 3;

// He initialisation for the leaky ReLU: N(0, gain^2 / fan_in) times `scale`.
void msr_init(const Variable& weight, double scale, Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + kSlope * kSlope));
  nn::init::normal_(weight, 0.0,
                    scale * gain / std::sqrt(static_cast<double>(nn::init::fan_in(weight.shape()))), gen);
}

// A linear (activation-free) layer's initialisation: N(0, 1 / fan_in); its bias (if any) 0.
void linear_init(const Variable& weight, const Variable& bias, Generator& gen) {
  nn::init::normal_(weight, 0.0, 1.0 / std::sqrt(static_cast<double>(nn::init::fan_in(weight.shape()))), gen);
  if (bias.defined()) nn::init::zeros_(bias);
}

// conv(x) without its bias, then the bias and the leaky ReLU in one op.
Variable conv_lrelu(const nn::Conv2d& conv, const Variable& x) {
  const PrecisionScope precision = conv.precision_scope();
  return bias_activation(conv2d(x, conv.weight, Variable(), conv.params), conv.bias,
                         kernels::Activation::leaky_relu, kSlope);
}

// R3GAN's variance scaling of a block's first two convolutions, for a part of L blocks of 3
// convolutions each: L^(-1/(2*3-2)).
double block_scale() { return std::pow(static_cast<double>(kBlocksPerPart), -0.25); }

}  // namespace

R3ganBlock::R3ganBlock(int64_t channels, int64_t expansion, int64_t group_width, double scale,
                       Generator& gen) {
  const int64_t wide = channels * expansion;
  TANDEM_CHECK(channels >= 1 && expansion >= 1 && group_width >= 1 && wide % group_width == 0,
               "R3ganBlock: channels " << channels << " times expansion " << expansion
                                       << " must be a positive multiple of the group width " << group_width);
  expand = register_module(
      "expand", std::make_shared<nn::Conv2d>(channels, wide, 1, kernels::Conv2dParams{}, true, gen));
  grouped = register_module(
      "grouped",
      std::make_shared<nn::Conv2d>(
          wide, wide, 3, kernels::Conv2dParams{.padding = 1, .groups = wide / group_width}, true, gen));
  project = register_module(
      "project", std::make_shared<nn::Conv2d>(wide, channels, 1, kernels::Conv2dParams{}, false, gen));
  for (const auto& conv : {expand, grouped}) {
    msr_init(conv->weight, scale, gen);
    nn::init::zeros_(conv->bias);
  }
  nn::init::zeros_(project->weight);  // fix-up: the residual branch starts at 0
}

Variable R3ganBlock::forward(const Variable& x) {
  return x + project->forward(conv_lrelu(*grouped, conv_lrelu(*expand, x)));
}

R3ganGenerator::R3ganGenerator(int64_t noise, int64_t image_channels, Generator& gen) {
  basis = register_module("basis", std::make_shared<nn::Linear>(noise, kWidths[0] * 7 * 7, true, gen));
  msr_init(basis->weight, 1.0, gen);
  nn::init::zeros_(basis->bias);
  for (size_t s = 0; s < 3; ++s) {
    blocks.push_back(register_module(
        "block" + std::to_string(s),
        std::make_shared<R3ganBlock>(kWidths[s], R3gan::kExpansion, R3gan::kGroupWidth, block_scale(), gen)));
    if (s + 1 < 3) {
      transitions.push_back(register_module(
          "up" + std::to_string(s),
          std::make_shared<nn::Conv2d>(kWidths[s], kWidths[s + 1], 1, kernels::Conv2dParams{}, false, gen)));
      linear_init(transitions.back()->weight, Variable(), gen);
    }
  }
  to_image = register_module("to_image", std::make_shared<nn::Conv2d>(kWidths[2], image_channels, 1,
                                                                      kernels::Conv2dParams{}, true, gen));
  linear_init(to_image->weight, to_image->bias, gen);
}

Variable R3ganGenerator::forward(const Variable& z) {
  Variable h;
  {
    const PrecisionScope precision = basis->precision_scope();
    h = linear(z, basis->weight, Variable());
  }
  h = reshape(bias_activation(h, basis->bias, kernels::Activation::leaky_relu, kSlope),
              {z.size(0), kWidths[0], 7, 7});
  for (size_t s = 0; s < 3; ++s) {
    h = blocks[s]->forward(h);
    if (s < transitions.size()) h = upsample2d(transitions[s]->forward(h), filter_(h));
  }
  return to_image->forward(h);
}

R3ganDiscriminator::R3ganDiscriminator(int64_t image_channels, Generator& gen) {
  from_image = register_module(
      "from_image",
      std::make_shared<nn::Conv2d>(image_channels, kWidths[2], 1, kernels::Conv2dParams{}, true, gen));
  msr_init(from_image->weight, 1.0, gen);
  nn::init::zeros_(from_image->bias);
  for (size_t s = 0; s < 3; ++s) {
    const int64_t width = kWidths[2 - s];
    blocks.push_back(register_module(
        "block" + std::to_string(s),
        std::make_shared<R3ganBlock>(width, R3gan::kExpansion, R3gan::kGroupWidth, block_scale(), gen)));
    if (s + 1 < 3) {
      transitions.push_back(register_module(
          "down" + std::to_string(s),
          std::make_shared<nn::Conv2d>(width, kWidths[1 - s], 1, kernels::Conv2dParams{}, false, gen)));
      linear_init(transitions.back()->weight, Variable(), gen);
    }
  }
  basis = register_module(
      "basis", std::make_shared<nn::Conv2d>(kWidths[0], kWidths[0], 7,
                                            kernels::Conv2dParams{.groups = kWidths[0]}, false, gen));
  linear_init(basis->weight, Variable(), gen);
  logit = register_module("logit", std::make_shared<nn::Linear>(kWidths[0], 1, true, gen));
  linear_init(logit->weight, logit->bias, gen);
}

Variable R3ganDiscriminator::forward(const Variable& x) {
  Variable h = conv_lrelu(*from_image, x);
  for (size_t s = 0; s < 3; ++s) {
    h = blocks[s]->forward(h);
    if (s < transitions.size()) h = transitions[s]->forward(downsample2d(h, filter_(h)));
  }
  return logit->forward(flatten(basis->forward(h)));
}

std::vector<GanModel::ResolutionLayer> r3gan_resolution_layers(R3ganGenerator& g, R3ganDiscriminator& d) {
  std::vector<GanModel::ResolutionLayer> layers = {{7, g.basis.get()},
                                                   {28, g.to_image.get()},
                                                   {28, d.from_image.get()},
                                                   {7, d.basis.get()},
                                                   {7, d.logit.get()}};
  for (size_t s = 0; s < 3; ++s) {
    const int64_t up = 7 << s, down = 28 >> s;
    layers.push_back({up, g.blocks[s].get()});
    layers.push_back({down, d.blocks[s].get()});
    if (s < 2) {
      layers.push_back({up, g.transitions[s].get()});
      layers.push_back({down / 2, d.transitions[s].get()});
    }
  }
  return layers;
}

std::vector<GanModel::ResolutionLayer> R3gan::resolution_layers() {
  return r3gan_resolution_layers(*g_, *d_);
}

R3gan::R3gan(Generator& gen, int64_t channels) : channels_(channels) {
  g_ = register_module("generator", std::make_shared<R3ganGenerator>(kNoise, channels, gen));
  d_ = register_module("discriminator", std::make_shared<R3ganDiscriminator>(channels, gen));
  generator = g_;
  discriminator = d_;
}

}  // namespace tandem::models
