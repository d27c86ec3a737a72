// A small StyleGAN2 (Karras et al. 2020, the semantics of its official code) for 28x28
// images, built from autograd/nn_stylegan.h and nn_stylegan_nets.h.
//
// Contract:
// - StyleGan2Generator(channels): the mapping network z [N, 64] -> w [N, 64] (pixel_norm,
//   then 4 EqualizedLinear layers at lr_multiplier 0.01: StyleGAN2 has 8, halved to keep it
//   small), a learned constant [32, 7, 7] input and three synthesis stages, 7x7 (one
//   modulated 3x3 conv), 14x14 and 28x28 (two each; 32 channels, 16 at 28x28). Every
//   synthesis conv is demodulated, then its noise is injected (NoiseInjection), then bias +
//   leaky ReLU 0.2 with gain sqrt(2) (bias_activation). Between stages the features are
//   upsampled by upsample2d with the [1, 3, 3, 1] filter, then the stage's first modulated
//   conv runs (StyleGAN2 fuses the two into a transposed conv; here they are separate).
//   Each stage has a toRGB (modulated 1x1 conv, no demodulation, with bias) and the image is
//   the skip generator's sum: img_7 = rgb_7, img_s = upsample2d(img_{s-1}) + rgb_s. The
//   output is that sum, no tanh (as StyleGAN2).
// - Per-layer latents, as StyleGAN2's synthesis network takes them: w is broadcast to ws
//   [N, kNumWs = 6, 64] and layer l takes ws[:, index(l)], StyleGAN2's indexing (each
//   stage's toRGB shares its index with the next stage's first conv: conv0 0, toRGB 1,
//   conv1 1, conv2 2, toRGB 3, conv3 3, conv4 4, toRGB 5). forward (sampling: pictures,
//   FID) gives every index the same w; the path-length penalty differentiates by ws
//   (models/path_length.h).
// - Style mixing (StyleGAN2's style_mixing_prob, its regulariser; training only:
//   generate_training and generate_styled): with probability `style_mixing` a sample takes
//   the layers from a cutoff on from a second latent's w, the cutoff uniform in 1..5
//   (StyleGAN2: ws[:, cutoff:] = mapping(z2)[:, cutoff:]). StyleGAN2 draws one decision and
//   one cutoff per batch on each GPU, so its mixing changes with the GPU count; here each
//   sample decides from two N(0, 1) columns of its own z row (u1 < Phi^-1(p): mixed; the
//   cutoff is the first layer l with u2 <= Phi^-1(l / 5)), so N ranks mix exactly the rows
//   one process mixes, and every sample has StyleGAN2's probabilities.
// - The noise is part of the generator's input, not drawn inside: z's row is
//   [latent (64) | noise 7x7 | 14x14 | 14x14 | 28x28 | 28x28 | mixing latent (64) |
//   mixing draws (2) | path-length noise C x 28 x 28] (noise_dim() = 2139 + 784 C columns),
//   so a batch's noise rows (randn_global_rows) carry it and N ranks draw rank r's rows of
//   the noise one process draws for the global batch. The image ignores the last 784 C
//   columns; generate_styled hands them to the penalty.
// - The model keeps the running mean path length as a buffer "path_length_mean" (a
//   float64 scalar, 0 at first), StyleGAN2's pl_mean.
// - StyleGan2Discriminator(channels): StyleGAN2's resnet D: fromRGB (EqualizedConv2d 1x1,
//   16 channels, activation), then two StyleGan2DBlocks, 28x28 16 -> 32 and 14x14 32 -> 32,
//   then at 7x7 minibatch_stddev (1 channel, groups of stylegan2_stddev_group(N)), a 3x3
//   EqualizedConv2d 33 -> 32, EqualizedLinear 32*7*7 -> 32 and 32 -> 1 (activations
//   between; act = leaky ReLU 0.2 times sqrt(2)). The stddev groups lie in one rank's batch
//   (nn_stylegan.h): N ranks equal one process that applies D to each rank's slice in turn.
// - StyleGan2DBlock(in, out): StyleGAN2's resnet D block, x [N, in, H, W] -> [N, out, H/2,
//   W/2]: (act(conv1(down(act(conv0(x))))) + skip(down(x))) / sqrt(2), conv0 3x3 in -> in,
//   conv1 3x3 in -> out (EqualizedConv2d, padding 1, bias), skip 1x1 in -> out without bias,
//   down = downsample2d by the [1, 3, 3, 1] filter (StyleGAN2 blurs, then convolves at
//   stride 2; here the blur-and-subsample comes first and the convolution runs at stride 1).
// - conv_clamp (StyleGAN2-ADA's, which it sets to 256 whenever layers run in fp16; off by
//   default): every synthesis conv's output after its bias and activation, every toRGB's
//   output, and D's fromRGB, block convs (not the skips) and 7x7 conv after their
//   activation are clamped to [-conv_clamp, conv_clamp]; the gradient is 0 where it clamped.
//   make_gan sets kConvClamp for --precision fp16 (activations stay float32 here, but the
//   next GEMM rounds them to fp16, whose range ends at 65504).
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn_stylegan.h"
#include "autograd/nn_stylegan_nets.h"
#include "models/gan.h"
#include "models/resampling_filter.h"

namespace tandem::models {

// The minibatch_stddev group size for a batch of N: StyleGAN2's 4, or the largest smaller
// size that divides N (N = 6: 3), so that any batch size trains.
int64_t stylegan2_stddev_group(int64_t batch);

class StyleGan2Generator final : public nn::Module {
 public:
  static constexpr int64_t kLatent = 64, kWDim = 64, kMappingLayers = 4, kNumWs = 6;
  static constexpr double kStyleMixing = 0.9;  // StyleGAN2's style_mixing_prob
  static constexpr double kConvClamp = 256.0;  // StyleGAN2-ADA's conv_clamp for fp16 layers
  // z's columns: the mixing latent and its two draws follow the five noise inputs.
  static constexpr int64_t kMixingColumn = kLatent + 7 * 7 + 2 * 14 * 14 + 2 * 28 * 28;
  // z's columns before the path-length noise.
  static constexpr int64_t kInputNoiseDim = kMixingColumn + kLatent + 2;

  // style_mixing: the probability of a mixed sample in training, in [0, 1] (0: off).
  StyleGan2Generator(Generator& gen, int64_t image_channels, double style_mixing = kStyleMixing);
  // z [N, noise_dim()] -> images [N, channels, 28, 28], without style mixing.
  Variable forward(const Variable& z) override;
  std::string type_name() const override { return "StyleGan2Generator"; }
  int64_t noise_dim() const { return kInputNoiseDim + image_channels_ * 28 * 28; }
  double style_mixing() const { return style_mixing_; }
  // The mapping network's w for z, broadcast to the per-layer latents ws [N, kNumWs, 64].
  Variable styles(const Variable& z);
  // styles(z) with style mixing (see the contract): the per-layer latents of training.
  Variable mixed_styles(const Variable& z);
  // The [N, kNumWs, 1] mask of the layers that take the mixing latent's w (1) for z's
  // mixing draws and probability p; all 0 at p = 0.
  static Tensor mixing_mask(const Tensor& z, double p);
  // The synthesis network: images for per-layer latents ws and z's noise columns.
  Variable synthesis(const Variable& ws, const Variable& z);
  // The toRGB outputs of the three stages for ws and z (as synthesis), before the skip sum:
  // [N, C, 7, 7], [N, C, 14, 14], [N, C, 28, 28].
  std::vector<Variable> rgb_outputs(const Variable& ws, const Variable& z);

  std::shared_ptr<nn::MappingNetwork> mapping;
  Variable constant;  // [32, 7, 7], N(0, 1)
  // The synthesis convs in order (7: 1; 14: 2; 28: 2), each with its noise and bias.
  std::vector<std::shared_ptr<nn::ModulatedConv2d>> convs;
  std::vector<std::shared_ptr<nn::NoiseInjection>> noises;
  std::vector<Variable> biases;
  std::vector<std::shared_ptr<nn::ModulatedConv2d>> to_rgb;  // one per stage
  double conv_clamp = kernels::kNoClamp;                     // see the contract

 private:
  // The synthesis conv i on x with latent w and its noise from z's columns.
  Variable layer(size_t i, const Variable& x, const Variable& w, const Variable& z, int64_t& column);
  void check_z(const Variable& z) const;
  int64_t image_channels_;
  double style_mixing_;
  ResamplingFilter filter_{{1, 3, 3, 1}};  // StyleGAN2's [1, 3, 3, 1]
};

class StyleGan2DBlock final : public nn::Module {
 public:
  StyleGan2DBlock(Generator& gen, int64_t in_channels, int64_t out_channels);
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "StyleGan2DBlock"; }

  std::shared_ptr<nn::EqualizedConv2d> conv0, conv1, skip;
  double conv_clamp = kernels::kNoClamp;  // conv0's and conv1's activations (not the skip's)

 private:
  ResamplingFilter filter_{{1, 3, 3, 1}};  // StyleGAN2's [1, 3, 3, 1]
};

class StyleGan2Discriminator final : public nn::Module {
 public:
  StyleGan2Discriminator(Generator& gen, int64_t image_channels);
  // x [N, channels, 28, 28] -> logits [N, 1].
  Variable forward(const Variable& x) override;
  std::string type_name() const override { return "StyleGan2Discriminator"; }

  std::shared_ptr<nn::EqualizedConv2d> from_rgb, conv;
  std::shared_ptr<StyleGan2DBlock> block28, block14;
  std::shared_ptr<nn::EqualizedLinear> fc, out;
  // fromRGB's and the 7x7 conv's activations and the blocks' (set_conv_clamp sets them all).
  double conv_clamp = kernels::kNoClamp;
  void set_conv_clamp(double clamp);
};

class StyleGan2 final : public GanModel {
 public:
  StyleGan2(Generator& gen, int64_t image_channels, double style_mixing = StyleGan2Generator::kStyleMixing,
            double conv_clamp = kernels::kNoClamp);
  std::string type_name() const override { return "stylegan2"; }
  Variable generate(const Variable& z) override { return g_->forward(z); }
  Variable generate_training(const Variable& z) override { return g_->synthesis(g_->mixed_styles(z), z); }
  Variable discriminate(const Variable& x) override { return d_->forward(x); }
  int64_t noise_dim() const override { return g_->noise_dim(); }
  Shape sample_shape() const override { return {image_channels_, 28, 28}; }
  StyledImages generate_styled(const Variable& z) override;
  // G's synthesis convs and toRGBs at the side they make (7, 14, 28); D's fromRGB and
  // block28 at 28, block14 at 14, its 7x7 epilogue (conv, fc, out) at 7. The mapping network
  // has no resolution: it takes a dtype only when every layer does (StyleGAN keeps it fp32).
  std::vector<ResolutionLayer> resolution_layers() override;

 private:
  int64_t image_channels_;
  std::shared_ptr<StyleGan2Generator> g_;
  std::shared_ptr<StyleGan2Discriminator> d_;
  Tensor* path_length_mean_;  // the buffer
};

}  // namespace tandem::models
