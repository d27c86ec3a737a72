// R3GAN's modern baseline (Huang et al. 2024, "The GAN is dead; long live the GAN!") at
// small scale, for 28x28 images of 1 or 3 channels.
//
// Contract:
// - R3ganBlock(channels, expansion, group_width, scale, gen): R3GAN's residual block,
//   x + project(act(grouped(act(expand(x))))): a 1x1 convolution to channels * expansion, a
//   3x3 convolution in groups of group_width channels, a 1x1 convolution back, act the
//   leaky ReLU (0.2) after each of the first two with their biases (bias_activation); no
//   normalisation, an identity skip. The first two are He-initialised for the leaky ReLU and
//   scaled by `scale` (R3GAN's variance scaling, L^(-1/4) for L blocks); `project` has no
//   bias and starts at zero (fix-up initialisation), so at initialisation the block returns
//   its input exactly. channels * expansion must divide by group_width.
// - R3gan: G z [64] -> linear to 64 x 7 x 7, leaky ReLU -> block(64) -> 1x1 to 32, upsample
//   -> block(32) -> 1x1 to 16, upsample -> block(16) -> 1x1 to C (with a bias; no tanh, as
//   R3GAN's generator). Upsampling is upsample2d with the [1, 2, 1] filter. D the mirror:
//   1x1 from C to 16, leaky ReLU -> block(16) -> downsample, 1x1 to 32 -> block(32) ->
//   downsample, 1x1 to 64 -> block(64) -> R3GAN's discriminative basis (a depthwise 7x7
//   convolution to 64 x 1 x 1) -> linear to one logit. Blocks: expansion 2, group width 16.
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn.h"
#include "models/gan.h"
#include "models/resampling_filter.h"

namespace tandem::models {

class R3ganBlock final : public nn::Module {
 public:
  R3ganBlock(int64_t channels, int64_t expansion, int64_t group_width, double scale, Generator& gen);
  std::string type_name() const override { return "R3ganBlock"; }
  Variable forward(const Variable& x) override;

  std::shared_ptr<nn::Conv2d> expand;   // 1x1, channels -> channels * expansion
  std::shared_ptr<nn::Conv2d> grouped;  // 3x3, groups of group_width channels
  std::shared_ptr<nn::Conv2d> project;  // 1x1 back to channels, no bias, zero at initialisation
};

// R3GAN's generator: see the contract above. blocks[s] runs at 7 * 2^s.
class R3ganGenerator final : public nn::Module {
 public:
  R3ganGenerator(int64_t noise, int64_t image_channels, Generator& gen);
  std::string type_name() const override { return "R3ganGenerator"; }
  Variable forward(const Variable& z) override;

  std::shared_ptr<nn::Linear> basis;
  std::vector<std::shared_ptr<R3ganBlock>> blocks;
  std::vector<std::shared_ptr<nn::Conv2d>> transitions;  // 1x1 before each upsampling
  std::shared_ptr<nn::Conv2d> to_image;

 private:
  ResamplingFilter filter_{{1, 2, 1}};
};

// R3GAN's discriminator: see the contract above. blocks[s] runs at 28 / 2^s.
class R3ganDiscriminator final : public nn::Module {
 public:
  R3ganDiscriminator(int64_t image_channels, Generator& gen);
  std::string type_name() const override { return "R3ganDiscriminator"; }
  Variable forward(const Variable& x) override;

  std::shared_ptr<nn::Conv2d> from_image;
  std::vector<std::shared_ptr<R3ganBlock>> blocks;
  std::vector<std::shared_ptr<nn::Conv2d>> transitions;  // 1x1 after each downsampling
  std::shared_ptr<nn::Conv2d> basis;                     // depthwise 7x7 to 1x1
  std::shared_ptr<nn::Linear> logit;

 private:
  ResamplingFilter filter_{{1, 2, 1}};
};

// The `r3gan` model of make_gan: R3ganGenerator and R3ganDiscriminator for C x 28 x 28.
class R3gan final : public GanModel {
 public:
  R3gan(Generator& gen, int64_t channels);
  std::string type_name() const override { return "r3gan"; }
  Variable generate(const Variable& z) override { return g_->forward(z); }
  Variable discriminate(const Variable& x) override { return d_->forward(x); }
  int64_t noise_dim() const override { return kNoise; }
  Shape sample_shape() const override { return {channels_, 28, 28}; }
  // r3gan_resolution_layers of its networks.
  std::vector<ResolutionLayer> resolution_layers() override;
  R3ganGenerator& g() { return *g_; }
  R3ganDiscriminator& d() { return *d_; }

  static constexpr int64_t kNoise = 64;
  static constexpr int64_t kExpansion = 2;
  static constexpr int64_t kGroupWidth = 16;

 private:
  int64_t channels_;
  std::shared_ptr<R3ganGenerator> g_;
  std::shared_ptr<R3ganDiscriminator> d_;
};

// The layers of an R3GAN pair with the side each works at, for set_low_precision (R3GAN
// trains its high-resolution stages in bf16): G's basis, blocks[s], transitions[s] at
// 7 * 2^s, to_image at 28; D's from_image at 28, blocks[s] at 28 / 2^s, transitions[s] at the
// side they read after downsampling, the basis and logit at 7.
std::vector<GanModel::ResolutionLayer> r3gan_resolution_layers(R3ganGenerator& g, R3ganDiscriminator& d);

}  // namespace tandem::models
