// The GAN models: ring8-mlp, mlp (optionally dynamic), dcgan, dcgan64 and pggan; r3gan
// (models/r3gan.h) is built here too.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/init.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "models/fused_layers.h"
#include "models/gan.h"
#include "models/gradient_penalty.h"
#include "models/r3gan.h"
#include "models/stylegan2.h"

namespace tandem::models {

namespace {

using nn::Linear;
using nn::Sequential;

// ring8: G 16 -> 128 -> 128 -> 2, D (2 * kPack) -> 128 -> 128 -> 1. D judges packs of
// kPack samples at once (PacGAN), which penalises a generator that drops modes.
class Ring8Mlp final : public GanModel {
 public:
  explicit Ring8Mlp(Generator& gen) {
    generator = register_module(
        "generator", std::make_shared<Sequential>(
                         std::make_shared<Linear>(kNoise, 128, true, gen), std::make_shared<nn::ReLU>(),
                         std::make_shared<Linear>(128, 128, true, gen), std::make_shared<nn::ReLU>(),
                         std::make_shared<Linear>(128, 2, true, gen)));
    discriminator = register_module(
        "discriminator", std::make_shared<Sequential>(std::make_shared<Linear>(2 * kPack, 128, true, gen),
                                                      std::make_shared<nn::LeakyReLU>(0.2),
                                                      std::make_shared<Linear>(128, 128, true, gen),
                                                      std::make_shared<nn::LeakyReLU>(0.2),
                                                      std::make_shared<Linear>(128, 1, true, gen)));
  }
  std::string type_name() const override { return "ring8-mlp"; }
  Variable generate(const Variable& z) override { return generator->forward(z); }
  Variable discriminate(const Variable& x) override {
    TANDEM_CHECK(x.size(0) % kPack == 0, "ring8-mlp: the batch (" << x.size(0) << ") must be a multiple of "
                                                                  << kPack
                                                                  << " (the discriminator's pack size)");
    return discriminator->forward(reshape(x, {x.size(0) / kPack, 2 * kPack}));
  }
  int64_t noise_dim() const override { return kNoise; }
  Shape sample_shape() const override { return {2}; }
  bool is_image_model() const override { return false; }

 private:
  static constexpr int64_t kNoise = 16;
  static constexpr int64_t kPack = 4;
};

// The classic MLP GAN of DESIGN.md §7. D's layer names follow the reference PyTorch model.
class MlpDiscriminator final : public nn::Module {
 public:
  MlpDiscriminator(Generator& gen, int64_t channels) {
    l0 = register_module("l0", std::make_shared<Linear>(784 * channels, 256, true, gen));
    l1 = register_module("l1", std::make_shared<Linear>(256, 256, true, gen));
    l2 = register_module("l2", std::make_shared<Linear>(256, 1, true, gen));
    extra = register_module("extra", std::make_shared<Linear>(256, 256, true, gen));
  }
  std::string type_name() const override { return "MlpDiscriminator"; }
  Variable run(const Variable& x, bool use_extra) {
    Variable h = leaky_relu(l0->forward(x), 0.2);
    if (use_extra) h = relu(extra->forward(h));
    return l2->forward(leaky_relu(l1->forward(h), 0.2));
  }
  std::shared_ptr<Linear> l0, l1, l2, extra;
};

class MlpGan final : public GanModel {
 public:
  MlpGan(Generator& gen, bool dynamic, int64_t channels) : dynamic_(dynamic), channels_(channels) {
    generator = register_module(
        "generator",
        std::make_shared<Sequential>(
            std::make_shared<Linear>(64, 256, true, gen), std::make_shared<nn::ReLU>(),
            std::make_shared<Linear>(256, 256, true, gen), std::make_shared<nn::ReLU>(),
            std::make_shared<Linear>(256, 784 * channels, true, gen), std::make_shared<nn::Tanh>()));
    d_ = register_module("discriminator", std::make_shared<MlpDiscriminator>(gen, channels));
    discriminator = d_;
  }
  std::string type_name() const override { return dynamic_ ? "mlp (dynamic)" : "mlp"; }
  Variable generate(const Variable& z) override { return generator->forward(z); }
  Variable discriminate(const Variable& x) override { return d_->run(flatten(x), uses_extra()); }
  int64_t noise_dim() const override { return 64; }
  Shape sample_shape() const override { return {channels_, 28, 28}; }
  Tensor prepare_real(const Tensor& real) const override {
    return real.reshape({real.size(0), 784 * channels_});
  }
  std::string structure() const override { return uses_extra() ? "extra D layer in use" : ""; }
  bool uses_extra() const { return dynamic_ && (iteration_ / 5) % 2 == 1; }

 private:
  bool dynamic_;
  int64_t channels_;
  std::shared_ptr<MlpDiscriminator> d_;
};

// Pairs the GEMM layers (Linear, Conv2d, ConvTranspose2d) of `part`, in order, with `sides`.
void add_resolution_layers(const nn::Module& part, const std::vector<int64_t>& sides,
                           std::vector<GanModel::ResolutionLayer>& out) {
  size_t next = 0;
  for (const auto& layer : part.children()) {
    nn::Module* m = layer.get();
    if (dynamic_cast<Linear*>(m) || dynamic_cast<nn::Conv2d*>(m) || dynamic_cast<nn::ConvTranspose2d*>(m)) {
      TANDEM_CHECK(next < sides.size(), "resolution layers: more GEMM layers than sides");
      out.push_back({sides[next++], m});
    }
  }
  TANDEM_CHECK(next == sides.size(),
               "resolution layers: " << sides.size() << " sides for " << next << " layers");
}

// DCGAN for 28x28: G z -> 128x7x7 -> 64x14x14 -> Cx28x28 (C channels); D the mirror image.
class DcGan final : public GanModel {
 public:
  DcGan(Generator& gen, int64_t channels) : channels_(channels) {
    auto g = std::make_shared<Sequential>();
    g->push_back(std::make_shared<Linear>(kNoise, 128 * 7 * 7, false, gen));
    g->push_back(std::make_shared<nn::Reshape>(Shape{128, 7, 7}));
    g->push_back(std::make_shared<nn::BatchNorm2d>(128));
    g->push_back(std::make_shared<nn::ReLU>());
    g->push_back(std::make_shared<nn::ConvTranspose2d>(128, 64, 4, 2, 1, 0, false, gen));
    g->push_back(std::make_shared<nn::BatchNorm2d>(64));
    g->push_back(std::make_shared<nn::ReLU>());
    g->push_back(std::make_shared<nn::ConvTranspose2d>(64, channels, 4, 2, 1, 0, true, gen));
    g->push_back(std::make_shared<nn::Tanh>());
    generator = register_module("generator", g);
    auto d = std::make_shared<Sequential>();
    d->push_back(std::make_shared<nn::Conv2d>(channels, 64, 4, 2, 1, true, gen));
    d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    d->push_back(std::make_shared<nn::Conv2d>(64, 128, 4, 2, 1, true, gen));
    d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    d->push_back(std::make_shared<nn::Flatten>());
    d->push_back(std::make_shared<Linear>(128 * 7 * 7, 1, true, gen));
    discriminator = register_module("discriminator", d);
    // DCGAN initialisation: weights N(0, 0.02); batch-norm gamma N(1, 0.02), beta 0.
    for (auto& [name, p] : named_parameters()) {
      bool bn = name.find("generator.2.") == 0 || name.find("generator.5.") == 0;
      if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0) {
        nn::init::normal_(p, bn ? 1.0 : 0.0, 0.02, gen);
      } else if (bn) {
        nn::init::zeros_(p);
      }
    }
  }
  std::string type_name() const override { return "dcgan"; }
  // G's last layer and D's first two fuse their bias with the activation after them.
  Variable generate(const Variable& z) override { return forward_fused(sequential(generator), z); }
  Variable discriminate(const Variable& x) override { return forward_fused(sequential(discriminator), x); }
  int64_t noise_dim() const override { return kNoise; }
  Shape sample_shape() const override { return {channels_, 28, 28}; }
  std::vector<ResolutionLayer> resolution_layers() override {
    std::vector<ResolutionLayer> layers;
    add_resolution_layers(*generator, {7, 14, 28}, layers);
    add_resolution_layers(*discriminator, {28, 14, 7}, layers);
    return layers;
  }

 private:
  static const nn::Sequential& sequential(const std::shared_ptr<nn::Module>& part) {
    return static_cast<const nn::Sequential&>(*part);
  }
  static constexpr int64_t kNoise = 64;
  int64_t channels_;
};

// The classic DCGAN at 64x64 (Radford et al.): G z [nz] as [nz, 1, 1] -> 8w x 4 x 4 ->
// 4w x 8 x 8 -> 2w x 16 x 16 -> w x 32 x 32 -> C x 64 x 64 (transposed convolutions of 4,
// batch norm and ReLU between, tanh at the end); D the mirror image with strided
// convolutions and LeakyReLU(0.2), batch norm on all but its first layer, a 4x4 valid
// convolution to one logit. w = ngf = ndf (64 unless GanConfig::width says). The layers
// followed by batch norm have no bias (it would cancel); the others have one, fused with
// their activation.
class DcGan64 final : public GanModel {
 public:
  DcGan64(Generator& gen, int64_t channels, int64_t width) : channels_(channels), width_(width) {
    const int64_t w = width;
    auto g = std::make_shared<Sequential>();
    int64_t in = kNoise;
    for (int64_t out : {8 * w, 4 * w, 2 * w, w}) {
      const bool first = in == kNoise;
      g->push_back(
          std::make_shared<nn::ConvTranspose2d>(in, out, 4, first ? 1 : 2, first ? 0 : 1, 0, false, gen));
      g->push_back(std::make_shared<nn::BatchNorm2d>(out));
      g->push_back(std::make_shared<nn::ReLU>());
      in = out;
    }
    g->push_back(std::make_shared<nn::ConvTranspose2d>(w, channels, 4, 2, 1, 0, true, gen));
    g->push_back(std::make_shared<nn::Tanh>());
    generator = register_module("generator", g);
    auto d = std::make_shared<Sequential>();
    d->push_back(std::make_shared<nn::Conv2d>(channels, w, 4, 2, 1, true, gen));
    d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    for (int64_t out : {2 * w, 4 * w, 8 * w}) {
      d->push_back(std::make_shared<nn::Conv2d>(out / 2, out, 4, 2, 1, false, gen));
      d->push_back(std::make_shared<nn::BatchNorm2d>(out));
      d->push_back(std::make_shared<nn::LeakyReLU>(0.2));
    }
    d->push_back(std::make_shared<nn::Conv2d>(8 * w, 1, 4, 1, 0, true, gen));
    d->push_back(std::make_shared<nn::Flatten>());
    discriminator = register_module("discriminator", d);
    // DCGAN initialisation: convolution weights N(0, 0.02); batch-norm gamma N(1, 0.02),
    // beta 0; convolution biases keep their default draw (as dcgan's).
    for (const Sequential* part : {g.get(), d.get()}) {
      for (size_t i = 0; i < part->size(); ++i) {
        nn::Module& m = *(*part)[i];
        if (auto* bn = dynamic_cast<nn::BatchNorm*>(&m)) {
          nn::init::normal_(bn->weight, 1.0, 0.02, gen);
          nn::init::zeros_(bn->bias);
        } else if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) {
          nn::init::normal_(c->weight, 0.0, 0.02, gen);
        } else if (auto* t = dynamic_cast<nn::ConvTranspose2d*>(&m)) {
          nn::init::normal_(t->weight, 0.0, 0.02, gen);
        }
      }
    }
  }
  std::string type_name() const override { return "dcgan64"; }
  Variable generate(const Variable& z) override {
    return forward_fused(static_cast<const Sequential&>(*generator), reshape(z, {z.size(0), kNoise, 1, 1}));
  }
  Variable discriminate(const Variable& x) override {
    return forward_fused(static_cast<const Sequential&>(*discriminator), x);
  }
  int64_t noise_dim() const override { return kNoise; }
  Shape sample_shape() const override { return {channels_, 64, 64}; }
  std::vector<ResolutionLayer> resolution_layers() override {
    std::vector<ResolutionLayer> layers;
    add_resolution_layers(*generator, {4, 8, 16, 32, 64}, layers);
    add_resolution_layers(*discriminator, {64, 32, 16, 8, 4}, layers);
    return layers;
  }
  std::string structure() const override {
    return width_ == kDefaultWidth ? "" : "width " + std::to_string(width_) + " (ngf = ndf)";
  }

  static constexpr int64_t kDefaultWidth = 64;

 private:
  static constexpr int64_t kNoise = 100;
  int64_t channels_;
  int64_t width_;
};

// Progressive GAN, 7x7 -> 14x14 -> 28x28. Stage s trains at 7 * 2^s; the first half of
// stages 1 and 2 fades the new block in (alpha 0 -> 1) alongside the upsampled (G) or
// downsampled (D) output of the previous resolution. Which parameters a step uses thus
// changes between stages and when a fade ends: the dynamic case for the Reducer.
class ProgressiveGenerator final : public nn::Module {
 public:
  ProgressiveGenerator(Generator& gen, int64_t noise, int64_t channels, int64_t image_channels)
      : channels_(channels) {
    fc = register_module("fc", std::make_shared<Linear>(noise, channels * 7 * 7, true, gen));
    for (int s = 0; s < 3; ++s) {
      blocks.push_back(register_module("block" + std::to_string(s),
                                       std::make_shared<nn::Conv2d>(channels, channels, 3, 1, 1, true, gen)));
      to_rgb.push_back(
          register_module("to_rgb" + std::to_string(s),
                          std::make_shared<nn::Conv2d>(channels, image_channels, 1, 1, 0, true, gen)));
    }
  }
  std::string type_name() const override { return "ProgressiveGenerator"; }
  Variable run(const Variable& z, int stage, double alpha) {
    Variable h = leaky_relu(fc->forward(z), 0.2);
    h = reshape(h, {z.size(0), channels_, 7, 7});
    h = leaky_relu(blocks[0]->forward(h), 0.2);
    for (int s = 1; s <= stage; ++s) {
      Variable up = upsample_nearest2x(h);
      Variable next = leaky_relu(blocks[static_cast<size_t>(s)]->forward(up), 0.2);
      if (s == stage && alpha < 1.0) {
        Variable old_rgb = upsample_nearest2x(to_rgb[static_cast<size_t>(s - 1)]->forward(h));
        Variable new_rgb = to_rgb[static_cast<size_t>(s)]->forward(next);
        return tanh(scale(new_rgb, alpha) + scale(old_rgb, 1.0 - alpha));
      }
      h = next;
    }
    return tanh(to_rgb[static_cast<size_t>(stage)]->forward(h));
  }
  std::shared_ptr<Linear> fc;
  std::vector<std::shared_ptr<nn::Conv2d>> blocks, to_rgb;

 private:
  int64_t channels_;
};

class ProgressiveDiscriminator final : public nn::Module {
 public:
  ProgressiveDiscriminator(Generator& gen, int64_t channels, int64_t image_channels) {
    for (int s = 0; s < 3; ++s) {
      from_rgb.push_back(
          register_module("from_rgb" + std::to_string(s),
                          std::make_shared<nn::Conv2d>(image_channels, channels, 1, 1, 0, true, gen)));
      blocks.push_back(register_module("block" + std::to_string(s),
                                       std::make_shared<nn::Conv2d>(channels, channels, 3, 1, 1, true, gen)));
    }
    fc = register_module("fc", std::make_shared<Linear>(channels * 7 * 7, 1, true, gen));
  }
  std::string type_name() const override { return "ProgressiveDiscriminator"; }
  Variable run(const Variable& x, int stage, double alpha) {
    Variable h = leaky_relu(from_rgb[static_cast<size_t>(stage)]->forward(x), 0.2);
    for (int s = stage; s >= 1; --s) {
      h = avg_pool2x(leaky_relu(blocks[static_cast<size_t>(s)]->forward(h), 0.2));
      if (s == stage && alpha < 1.0) {
        Variable old = leaky_relu(from_rgb[static_cast<size_t>(s - 1)]->forward(avg_pool2x(x)), 0.2);
        h = scale(h, alpha) + scale(old, 1.0 - alpha);
      }
    }
    h = leaky_relu(blocks[0]->forward(h), 0.2);
    return fc->forward(flatten(h));
  }
  std::shared_ptr<Linear> fc;
  std::vector<std::shared_ptr<nn::Conv2d>> from_rgb, blocks;
};

class ProgressiveGan final : public GanModel {
 public:
  ProgressiveGan(Generator& gen, int64_t stage_iters, int64_t image_channels)
      : stage_iters_(stage_iters), image_channels_(image_channels) {
    TANDEM_CHECK(stage_iters > 0, "pggan: iterations per stage must be positive, got " << stage_iters);
    g_ = register_module("generator",
                         std::make_shared<ProgressiveGenerator>(gen, kNoise, kChannels, image_channels));
    d_ = register_module("discriminator",
                         std::make_shared<ProgressiveDiscriminator>(gen, kChannels, image_channels));
    generator = g_;
    discriminator = d_;
  }
  std::string type_name() const override { return "pggan"; }
  Variable generate(const Variable& z) override { return g_->run(z, stage(), alpha()); }
  Variable discriminate(const Variable& x) override { return d_->run(x, stage(), alpha()); }
  int64_t noise_dim() const override { return kNoise; }
  Shape sample_shape() const override {
    int64_t side = 7 << stage();
    return {image_channels_, side, side};
  }
  Shape data_shape() const override { return {image_channels_, 28, 28}; }
  Tensor prepare_real(const Tensor& real) const override {
    NoGradGuard no_grad;
    Variable x(real);
    for (int s = 2; s > stage(); --s) x = avg_pool2x(x);
    return x.data();
  }
  std::string structure() const override {
    std::string side = std::to_string(7 << stage());
    std::string out = "stage " + std::to_string(stage()) + " (" + side + "x" + side + ")";
    if (alpha() < 1.0) out += ", fade-in alpha " + std::to_string(alpha()).substr(0, 4);
    return out;
  }
  std::string step_key() const override {  // the exact alpha: the fade's kernels take it as an argument
    std::ostringstream os;
    os.precision(17);
    os << "stage " << stage() << " alpha " << alpha();
    return os.str();
  }
  int stage() const { return static_cast<int>(std::min<int64_t>(2, iteration_ / stage_iters_)); }
  double alpha() const {
    if (stage() == 0) return 1.0;
    int64_t into = iteration_ - stage() * stage_iters_;
    double fade = static_cast<double>(stage_iters_) / 2.0;
    return std::min(1.0, (static_cast<double>(into) + 1.0) / fade);
  }

 private:
  static constexpr int64_t kNoise = 64;
  static constexpr int64_t kChannels = 32;
  int64_t stage_iters_;
  int64_t image_channels_;
  std::shared_ptr<ProgressiveGenerator> g_;
  std::shared_ptr<ProgressiveDiscriminator> d_;
};

}  // namespace

const std::vector<std::string>& gan_model_names() {
  static const std::vector<std::string> names = {"ring8-mlp", "mlp",   "dcgan",    "dcgan64",
                                                 "pggan",     "r3gan", "stylegan2"};
  return names;
}

std::shared_ptr<GanModel> make_gan(const GanConfig& config) {
  TANDEM_CHECK(config.channels == 1 || config.channels == 3,
               "channels per pixel must be 1 (gray) or 3 (RGB), got " << config.channels);
  TANDEM_CHECK(config.channels == 1 || config.model != "ring8-mlp",
               "ring8-mlp learns 2-D points: it has no " << config.channels << "-channel form");
  Generator gen(config.seed);
  std::shared_ptr<GanModel> model;
  if (config.model == "ring8-mlp")
    model = std::make_shared<Ring8Mlp>(gen);
  else if (config.model == "mlp")
    model = std::make_shared<MlpGan>(gen, config.dynamic, config.channels);
  else if (config.model == "dcgan")
    model = std::make_shared<DcGan>(gen, config.channels);
  else if (config.model == "dcgan64")
    model = std::make_shared<DcGan64>(gen, config.channels,
                                      config.width > 0 ? config.width : DcGan64::kDefaultWidth);
  else if (config.model == "pggan")
    model = std::make_shared<ProgressiveGan>(gen, config.pggan_stage_iters, config.channels);
  else if (config.model == "r3gan")
    model = std::make_shared<R3gan>(gen, config.channels);
  else if (config.model == "stylegan2")
    model = std::make_shared<StyleGan2>(
        gen, config.channels, config.style_mixing.value_or(StyleGan2Generator::kStyleMixing),
        config.precision == DType::f16 ? StyleGan2Generator::kConvClamp : kernels::kNoClamp);
  else {
    std::string known;
    for (const auto& n : gan_model_names()) known += (known.empty() ? "" : ", ") + n;
    TANDEM_FAIL("unknown model '" << config.model << "' (known: " << known << ")");
  }
  TANDEM_CHECK(config.width >= 0, "width (dcgan64's ngf = ndf) must be at least 1 (0: the default "
                                      << DcGan64::kDefaultWidth << "), got " << config.width);
  TANDEM_CHECK(config.width == 0 || config.model == "dcgan64",
               "--width applies to the dcgan64 model only, not '" << config.model << "'");
  TANDEM_CHECK(
      !config.style_mixing || config.model == "stylegan2",
      "style mixing (--style-mixing) applies to the stylegan2 model only, not '" << config.model << "'");
  TANDEM_CHECK(!config.dynamic || config.model == "mlp",
               "--dynamic applies to the mlp model only, not '" << config.model << "'");
  const GanObjective& o = config.objective;
  TANDEM_CHECK(o.n_critic >= 1, "n_critic (D steps per G step) must be at least 1, got " << o.n_critic);
  TANDEM_CHECK(o.r1_every >= 1, "r1_every (D steps per R1 step) must be at least 1, got " << o.r1_every);
  TANDEM_CHECK(o.r1_gamma >= 0 && std::isfinite(o.r1_gamma),
               "r1_gamma must be a finite number >= 0 (0: off), got " << o.r1_gamma);
  TANDEM_CHECK(o.r2_gamma >= 0 && std::isfinite(o.r2_gamma),
               "r2_gamma must be a finite number >= 0 (0: off), got " << o.r2_gamma);
  TANDEM_CHECK(o.gp_lambda > 0 && std::isfinite(o.gp_lambda),
               "gp_lambda must be a positive finite number, got " << o.gp_lambda);
  if (o.loss == GanLoss::wgan_gp)
    check_critic_for_penalty(*model->discriminator, config.model, "--loss wgan-gp");
  if (o.r1_gamma > 0) check_critic_for_penalty(*model->discriminator, config.model, "--r1-gamma");
  if (o.r2_gamma > 0) check_critic_for_penalty(*model->discriminator, config.model, "--r2-gamma");
  TANDEM_CHECK(o.pl_weight >= 0 && std::isfinite(o.pl_weight),
               "pl_weight must be a finite number >= 0 (0: off), got " << o.pl_weight);
  TANDEM_CHECK(o.pl_every >= 1,
               "pl_every (G steps per path-length step) must be at least 1, got " << o.pl_every);
  TANDEM_CHECK(o.pl_batch_shrink >= 1,
               "pl_batch_shrink (every k-th row) must be at least 1, got " << o.pl_batch_shrink);
  TANDEM_CHECK(o.pl_decay > 0 && o.pl_decay <= 1,
               "pl_decay (the running mean's rate) must lie in (0, 1], got " << o.pl_decay);
  TANDEM_CHECK(o.pl_weight == 0 || dynamic_cast<StyleGan2*>(model.get()) != nullptr,
               "--pl-weight: path-length regularisation needs a generator with a mapping network "
               "(stylegan2), not '"
                   << config.model << "'");
  model->objective = o;
  set_low_precision(*model, config.precision, config.low_precision_res);
  return model;
}

void set_low_precision(GanModel& model, DType dtype, int64_t resolutions) {
  if (dtype == DType::f32) return;
  if (resolutions < 0) {
    model.set_compute_dtype(dtype);
    return;
  }
  set_low_precision(model.resolution_layers(), dtype, resolutions, model.type_name());
}

void set_low_precision(const std::vector<GanModel::ResolutionLayer>& layers, DType dtype, int64_t resolutions,
                       const std::string& what) {
  check_compute_dtype(dtype, what);
  TANDEM_CHECK(!layers.empty(), what << ": its layers are not of one resolution each, so " << resolutions
                                     << " resolutions in " << dtype_name(dtype)
                                     << " mean nothing; give every layer the dtype");
  TANDEM_CHECK(resolutions >= 1, what << ": " << resolutions << " resolutions; needs at least 1");
  std::vector<int64_t> sides;
  for (const auto& l : layers) sides.push_back(l.side);
  std::sort(sides.begin(), sides.end(), std::greater<>());
  sides.erase(std::unique(sides.begin(), sides.end()), sides.end());
  const int64_t lowest = sides[static_cast<size_t>(std::min<int64_t>(resolutions, std::ssize(sides)) - 1)];
  for (const auto& l : layers) {
    if (l.side >= lowest) l.layer->set_compute_dtype(dtype);
  }
}

}  // namespace tandem::models
