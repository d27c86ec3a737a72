// StyleGAN's composed networks, built from the blocks of autograd/nn_stylegan.h (every
// order of gradient: R1 goes through the residual discriminator's blocks).
//
// Contract:
// - ResidualBlock(in, out, options): StyleGAN2's residual discriminator block without its
//   resampling: y = (act(conv2(act(conv1(x)))) + skip(x)) / sqrt(2), conv1 an
//   EqualizedConv2d 3x3 in -> out and conv2 one out -> out (padding 1, bias), skip an
//   EqualizedConv2d 1x1 in -> out without bias when the channel counts differ (x itself
//   when they agree), act(h) = gain * leaky_relu(h, slope) (StyleGAN2's slope 0.2 and gain
//   sqrt(2)). x [N, in, H, W] -> [N, out, H, W].
// - MappingNetwork(z_dim, w_dim, options): StyleGAN's mapping z -> w: pixel_norm(z), then
//   options.layers EqualizedLinear layers (z_dim -> w_dim, then w_dim -> w_dim) with
//   lr_multiplier options.lr_multiplier (0.01: its weights learn 100 times slower), each
//   followed by act. z [N, z_dim] -> w [N, w_dim]. The layers are children "fc0", "fc1", ...
// - Both draw their weights from `gen` in registration order; errors name the module.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "autograd/nn_stylegan.h"

namespace tandem::nn {

struct StyleGanActivation {
  double slope = 0.2;
  double gain = 1.4142135623730951;  // sqrt(2)
  double clamp = kernels::kNoClamp;  // StyleGAN's conv_clamp: the result clamped to [-clamp, clamp]
};

// gain * leaky_relu(x, slope), clamped to [-clamp, clamp] when clamp >= 0.
Variable stylegan_activation(const Variable& x, const StyleGanActivation& act);

class ResidualBlock : public Module {
 public:
  ResidualBlock(int64_t in_channels, int64_t out_channels, StyleGanActivation act = {},
                Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  std::shared_ptr<EqualizedConv2d> conv1, conv2, skip;  // skip: null when in == out
  StyleGanActivation act = {};
};

struct MappingOptions {
  int64_t layers = 8;
  double lr_multiplier = 0.01;
  StyleGanActivation act = {};
};

class MappingNetwork : public Module {
 public:
  MappingNetwork(int64_t z_dim, int64_t w_dim, MappingOptions options = {},
                 Generator& gen = default_generator());
  Variable forward(const Variable& z) override;
  std::string type_name() const override;

  std::vector<std::shared_ptr<EqualizedLinear>> layers;
  int64_t z_dim, w_dim;
  MappingOptions options;
};

}  // namespace tandem::nn
