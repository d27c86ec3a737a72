// StyleGAN's building blocks that need no kernel of their own, built from differentiable
// ops (every order of gradient: R1 and the path-length penalty go through them).
//
// Contract:
// - EqualizedLinear(in, out) and EqualizedConv2d(in, out, k, stride, padding): the
//   equalised learning rate. The stored weight ~ N(0, 1) / lr_multiplier, and the forward
//   uses weight * gain * lr_multiplier / sqrt(fan_in) (fan_in = in, or in * k * k) and
//   bias * lr_multiplier (bias starts at bias_init), so Adam moves every layer alike
//   whatever its fan-in; lr_multiplier 0.01 is StyleGAN's mapping network.
// - pixel_norm(x): x / sqrt(mean over axis 1 of x^2 + 1e-8), per sample (StyleGAN's latent
//   normalisation).
// - minibatch_stddev(x, group_size, num_channels): x [N, C, H, W] with the standard
//   deviation across groups of samples appended as num_channels channels (StyleGAN2's
//   layer): samples n and n + N/G*j (j < G) form a group of G = min(group_size, N) (N must
//   divide by G); each group's std over its members, averaged over C/num_channels channels
//   and H x W, becomes the new channels of every member. The groups lie inside one rank's
//   batch (as in StyleGAN2's own multi-GPU training): N ranks equal one process that
//   applies the layer to each rank's slice of the global batch in turn, not one that
//   applies it to the whole batch at once, whose groups span the slices (the test shows
//   both).
// - NoiseInjection(): x + strength * noise, strength a learned scalar (starting at 0) and
//   noise [N, 1, H, W] drawn N(0, 1) at each forward from a stream of the layer's own,
//   seeded from `gen` at construction (the layer may outlive `gen`), or passed in. Every
//   rank draws the same stream: for N ranks to equal one process, pass rank r's rows of a
//   global draw (models/stylegan2.h takes them from the batch's noise rows).
// - modulated_conv2d(x, weight, styles, demodulate, params): StyleGAN2's modulated
//   convolution. x [N, C, H, W], weight [O, C, k, k] (used as given), styles [N, C]: sample
//   n is convolved with w_n[o, c] = weight[o, c] * styles[n, c], and with `demodulate` each
//   w_n[o] is then divided by sqrt(sum over c, ki, kj of w_n[o]^2 + 1e-8), so scaling a
//   sample's styles leaves its output unchanged (up to that 1e-8). Two forms of the same
//   function (equal up to rounding), as StyleGAN2's code has them: ModulatedForm::grouped
//   runs ONE grouped conv2d over the batch (x as [1, N C, H, W], the weights as
//   [N O, C, k, k], groups N); ModulatedForm::scaled scales x by the styles, runs one
//   ordinary conv2d with the shared weight, and scales its output by the demodulation
//   coefficients rsqrt(styles^2 @ (sum over ki, kj of weight^2)^T + 1e-8) [N, O]. StyleGAN2
//   trains with the scaled form and evaluates with the grouped one: the scaled form's
//   backward and double backward (R1, path length) are convolutions with one shared weight
//   instead of N per-sample weights. params: stride, padding and dilation (groups must be
//   1). Returns [N, O, Ho, Wo].
// - ModulatedConv2d(in, out, kernel, w_dim): the layer around it (StyleGAN2's synthesis
//   layer and, demodulate off, its toRGB). It owns `affine`, an EqualizedLinear(w_dim, in)
//   with bias_init 1 that maps the latent w [N, w_dim] to the styles, the weight
//   [out, in, k, k] ~ N(0, 1) used at gain / sqrt(in k k) (equalised learning rate, as
//   EqualizedConv2d), and unless options.bias is false a bias [out] (zeros) added after
//   the convolution. Padding k / 2 keeps the size (odd k). Up- and downsampling are not
//   inside: compose it with upfirdn2d's resampling filters before or after, as StyleGAN2
//   does.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "autograd/module.h"
#include "autograd/ops.h"
#include "kernels/conv.h"
#include "runtime/rng.h"

namespace tandem::nn {

struct EqualizedOptions {
  bool bias = true;
  double bias_init = 0.0;
  double lr_multiplier = 1.0;
  double gain = 1.0;
};

class EqualizedLinear : public Module {
 public:
  EqualizedLinear(int64_t in_features, int64_t out_features, EqualizedOptions options = {},
                  Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [out, in], N(0, 1) / lr_multiplier
  Variable bias;    // [out], or undefined
  int64_t in_features, out_features;
  EqualizedOptions options;
};

class EqualizedConv2d : public Module {
 public:
  EqualizedConv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1,
                  int64_t padding = 0, EqualizedOptions options = {}, Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [out, in, k, k], N(0, 1) / lr_multiplier
  Variable bias;    // [out], or undefined
  int64_t in_channels, out_channels, kernel;
  kernels::Conv2dParams params;
  EqualizedOptions options;
};

Variable pixel_norm(const Variable& x);
Variable minibatch_stddev(const Variable& x, int64_t group_size = 4, int64_t num_channels = 1);

class NoiseInjection : public Module {
 public:
  explicit NoiseInjection(Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  Variable forward(const Variable& x, const Tensor& noise);
  std::string type_name() const override { return "NoiseInjection"; }

  Variable strength;  // a scalar [1], 0 at first

 private:
  Generator gen_;  // the noise stream
};

enum class ModulatedForm {
  grouped,  // one grouped convolution over the batch, a weight per sample
  scaled,   // the input scaled, one convolution with the shared weight, the output scaled
};

Variable modulated_conv2d(const Variable& x, const Variable& weight, const Variable& styles,
                          bool demodulate = true, const kernels::Conv2dParams& params = {},
                          ModulatedForm form = ModulatedForm::grouped);

struct ModulatedConvOptions {
  bool demodulate = true;
  bool bias = true;
  double gain = 1.0;  // of the weight (equalised learning rate)
  // Unset: scaled in training mode, grouped in eval mode, as StyleGAN2.
  std::optional<ModulatedForm> form = std::nullopt;
};

class ModulatedConv2d : public Module {
 public:
  ModulatedConv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t w_dim,
                  ModulatedConvOptions options = {}, Generator& gen = default_generator());
  // x [N, in, H, W], w [N, w_dim] -> [N, out, H, W].
  Variable forward(const Variable& x, const Variable& w);
  using Module::forward;  // the single-input one throws: a modulated conv needs its latent
  std::string type_name() const override;

  std::shared_ptr<EqualizedLinear> affine;  // w -> styles [N, in]
  Variable weight;                          // [out, in, k, k], N(0, 1)
  Variable bias;                            // [out], or undefined
  int64_t in_channels, out_channels, kernel, w_dim;
  ModulatedConvOptions options;
};

}  // namespace tandem::nn
