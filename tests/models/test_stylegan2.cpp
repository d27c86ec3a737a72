// The stylegan2 model: its shapes at 1 and 3 channels, the skip generator's sum of toRGB
// outputs, the noise taken from z's columns, style mixing, and the mapping network's lr
// multiplier.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "models/gan.h"
#include "models/stylegan2.h"
#include "runtime/rng.h"

using namespace tandem;
using namespace tandem::models;

namespace {

Tensor normal(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector(), y = b.to_vector();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

int64_t count_parameters(nn::Module& m) {
  int64_t n = 0;
  for (const Variable& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("stylegan2: G maps [N, 2139 + 784 C] to [N, C, 28, 28] and D that to [N, 1], C = 1 and 3",
          "[models][stylegan2]") {
  NoGradGuard no_grad;
  for (int64_t channels : {1, 3}) {
    INFO(channels << " channel(s)");
    auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 2, .channels = channels});
    CHECK(model->type_name() == "stylegan2");
    CHECK(model->noise_dim() == 64 + 49 + 2 * 196 + 2 * 784 + 66 + channels * 784);
    CHECK(model->sample_shape() == Shape{channels, 28, 28});
    Tensor fake = model->generate(Variable(normal({8, model->noise_dim()}, 1))).data();
    CHECK(fake.shape() == Shape{8, channels, 28, 28});
    CHECK(model->discriminate(Variable(fake)).data().shape() == Shape{8, 1});
    // A z of another width is named.
    CHECK_THROWS_WITH(model->generate(Variable(normal({2, 64}, 1))),
                      Catch::Contains("stylegan2") && Catch::Contains("[2, 64]"));
    const int64_t g = count_parameters(*model->generator), d = count_parameters(*model->discriminator);
    INFO("G " << g << ", D " << d << " parameters");
    CHECK(g > 0);
    CHECK(d > 0);
    if (channels == 1) WARN("stylegan2 parameters: G " << g << ", D " << d);
  }
}

TEST_CASE("stylegan2: the image is the sum of the upsampled toRGB outputs of the three stages",
          "[models][stylegan2]") {
  NoGradGuard no_grad;
  auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 5, .channels = 3});
  auto& g = static_cast<StyleGan2Generator&>(*model->generator);
  Variable z(normal({4, model->noise_dim()}, 3));
  std::vector<Variable> rgb = g.rgb_outputs(g.styles(z), z);
  REQUIRE(rgb.size() == 3);
  CHECK(rgb[0].shape() == Shape{4, 3, 7, 7});
  CHECK(rgb[1].shape() == Shape{4, 3, 14, 14});
  CHECK(rgb[2].shape() == Shape{4, 3, 28, 28});
  Tensor f = setup_filter({1, 3, 3, 1});
  Tensor by_hand = add(add(upsample2d(upsample2d(rgb[0], f), f), upsample2d(rgb[1], f)), rgb[2]).data();
  Tensor got = model->generate(z).data();
  CHECK(max_abs_difference(got, by_hand) < 1e-5);
  // Every stage contributes: leaving out the coarsest one changes the image.
  Tensor without_first = add(upsample2d(rgb[1], f), rgb[2]).data();
  CHECK(max_abs_difference(got, without_first) > 1e-3);
}

TEST_CASE("stylegan2: the noise inputs take z's columns after the latent", "[models][stylegan2]") {
  NoGradGuard no_grad;
  auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 5});
  auto& g = static_cast<StyleGan2Generator&>(*model->generator);
  Tensor z = normal({2, model->noise_dim()}, 4);
  // The same latent, other noise columns.
  auto values = z.to_vector(), other = normal(z.shape(), 9).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    if (static_cast<int64_t>(i) % model->noise_dim() >= StyleGan2Generator::kLatent) values[i] = other[i];
  }
  Tensor z_other_noise = Tensor::from_values(z.shape(), values);
  // Strength 0 at initialisation: the noise changes nothing.
  CHECK(max_abs_difference(model->generate(Variable(z)).data(),
                           model->generate(Variable(z_other_noise)).data()) == 0.0);
  for (auto& noise : g.noises) noise->strength.data().fill_(0.5);
  CHECK(max_abs_difference(model->generate(Variable(z)).data(),
                           model->generate(Variable(z_other_noise)).data()) > 1e-3);
  // The same z, the same image: nothing is drawn inside.
  CHECK(max_abs_difference(model->generate(Variable(z)).data(), model->generate(Variable(z)).data()) == 0.0);
}

TEST_CASE("stylegan2: style mixing picks StyleGAN2's samples and cutoffs from each row's own draws",
          "[models][stylegan2]") {
  const int64_t rows = 20000, layers = StyleGan2Generator::kNumWs;
  const Tensor z = normal({rows, 2139 + 784}, 11);
  for (double p : {0.9, 0.3}) {
    INFO("probability " << p);
    const std::vector<double> mask = StyleGan2Generator::mixing_mask(z, p).to_vector();
    REQUIRE(mask.size() == static_cast<size_t>(rows * layers));
    // Per row: layer 0 keeps the first latent; once a layer takes the second, every later
    // one does (a cutoff); a mixed row's cutoff is its first such layer.
    std::vector<int64_t> cutoffs(layers + 1, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const double* m = mask.data() + r * layers;
      CHECK(m[0] == 0.0);
      int64_t cutoff = layers;  // not mixed
      for (int64_t l = 0; l < layers; ++l) {
        REQUIRE((m[l] == 0.0 || m[l] == 1.0));
        if (m[l] == 1.0 && cutoff == layers) cutoff = l;
        if (cutoff < layers) REQUIRE(m[l] == 1.0);
      }
      ++cutoffs[static_cast<size_t>(cutoff)];
    }
    // StyleGAN2's probabilities: mixed with p, the cutoff uniform in 1..5. Binomial
    // standard deviations at 20000 rows are below 0.0035; the bounds are 4 of them.
    const double mixed = 1.0 - static_cast<double>(cutoffs[layers]) / rows;
    CHECK(std::abs(mixed - p) < 0.014);
    for (int64_t c = 1; c < layers; ++c) {
      INFO("cutoff " << c);
      CHECK(std::abs(static_cast<double>(cutoffs[static_cast<size_t>(c)]) / rows - p / (layers - 1)) < 0.012);
    }
    // The decision is the row's own: a row's mask does not depend on the batch around it.
    const Tensor one_row = StyleGan2Generator::mixing_mask(z.narrow_rows(137, 1), p);
    CHECK(one_row.to_vector() ==
          std::vector<double>(mask.begin() + 137 * layers, mask.begin() + 138 * layers));
  }
  for (double v : StyleGan2Generator::mixing_mask(z, 0.0).to_vector()) REQUIRE(v == 0.0);
  int64_t never_mixed = 0;
  const std::vector<double> always = StyleGan2Generator::mixing_mask(z, 1.0).to_vector();
  for (int64_t r = 0; r < rows; ++r)
    never_mixed += always[static_cast<size_t>(r * layers + layers - 1)] == 0.0;
  CHECK(never_mixed == 0);
}

TEST_CASE("stylegan2: training mixes the two latents' w by the mask; sampling never mixes",
          "[models][stylegan2]") {
  NoGradGuard no_grad;
  auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 8});
  auto& g = static_cast<StyleGan2Generator&>(*model->generator);
  REQUIRE(g.style_mixing() == 0.9);
  const int64_t n = 16, dim = StyleGan2Generator::kWDim;
  Variable z(normal({n, model->noise_dim()}, 12));
  const std::vector<double> w1 = g.mapping->forward(slice(z, 1, 0, 64)).data().to_vector();
  const std::vector<double> w2 =
      g.mapping->forward(slice(z, 1, StyleGan2Generator::kMixingColumn, 64)).data().to_vector();
  const std::vector<double> mask = StyleGan2Generator::mixing_mask(z.data(), 0.9).to_vector();
  const std::vector<double> ws = g.mixed_styles(z).data().to_vector();
  int64_t mixed_rows = 0;
  for (int64_t r = 0; r < n; ++r) {
    mixed_rows += mask[static_cast<size_t>(r * 6 + 5)] == 1.0;
    for (int64_t l = 0; l < 6; ++l)
      for (int64_t c = 0; c < dim; ++c) {
        const std::vector<double>& from = mask[static_cast<size_t>(r * 6 + l)] == 1.0 ? w2 : w1;
        REQUIRE(ws[static_cast<size_t>((r * 6 + l) * dim + c)] == from[static_cast<size_t>(r * dim + c)]);
      }
  }
  CHECK(mixed_rows > 0);
  CHECK(mixed_rows < n);
  // Sampling (pictures, FID) never mixes; training's images differ on the mixed rows alone.
  const Tensor sampled = model->generate(z).data();
  CHECK(max_abs_difference(sampled, g.synthesis(g.styles(z), z).data()) == 0.0);
  const Tensor trained = model->generate_training(z).data();
  for (int64_t r = 0; r < n; ++r) {
    INFO("row " << r);
    const double d = max_abs_difference(sampled.narrow_rows(r, 1), trained.narrow_rows(r, 1));
    if (mask[static_cast<size_t>(r * 6 + 5)] == 1.0)
      CHECK(d > 1e-6);
    else
      CHECK(d == 0.0);
  }
  // Off: training's images are the sampled ones.
  auto off = make_gan(GanConfig{.model = "stylegan2", .seed = 8, .style_mixing = 0.0});
  CHECK(max_abs_difference(off->generate_training(z).data(), off->generate(z).data()) == 0.0);
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "dcgan", .style_mixing = 0.5}),
                    Catch::Contains("style mixing (--style-mixing) applies to the stylegan2 model only"));
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "stylegan2", .style_mixing = 1.5}),
                    Catch::Contains("must lie in [0, 1], got 1.5"));
}

TEST_CASE("stylegan2: the mapping network's 4 layers use lr multiplier 0.01", "[models][stylegan2]") {
  NoGradGuard no_grad;
  auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 6});
  auto& g = static_cast<StyleGan2Generator&>(*model->generator);
  REQUIRE(g.mapping->layers.size() == 4);
  const int64_t n = 3, dim = 64;
  Tensor z = normal({n, dim}, 7);
  // By hand in double: pixel_norm, then per layer h = sqrt(2) lrelu_0.2(0.01 W h / sqrt(64) + 0.01 b).
  std::vector<double> h = z.to_vector();
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += h[r * dim + c] * h[r * dim + c];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-8);
    for (int64_t c = 0; c < dim; ++c) h[r * dim + c] *= inv;
  }
  for (const auto& layer : g.mapping->layers) {
    CHECK(layer->options.lr_multiplier == 0.01);
    auto w = layer->weight.data().to_vector(), b = layer->bias.data().to_vector();
    std::vector<double> next(static_cast<size_t>(n * dim));
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t o = 0; o < dim; ++o) {
        double acc = 0;
        for (int64_t c = 0; c < dim; ++c) acc += w[o * dim + c] * h[r * dim + c];
        double v = acc * 0.01 / std::sqrt(64.0) + 0.01 * b[o];
        next[r * dim + o] = std::sqrt(2.0) * (v > 0 ? v : 0.2 * v);
      }
    }
    h = next;
  }
  Tensor got = g.mapping->forward(Variable(z)).data();
  auto x = got.to_vector();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - h[i]));
    scale = std::max(scale, std::abs(h[i]));
  }
  CHECK(diff <= 1e-5 * scale + 1e-7);
  // The stored weights are N(0, 1) / 0.01: a standard deviation near 100.
  auto w0 = g.mapping->layers[0]->weight.data().to_vector();
  double sq = 0;
  for (double v : w0) sq += v * v;
  CHECK(std::sqrt(sq / static_cast<double>(w0.size())) > 50.0);
}

TEST_CASE("stylegan2: conv_clamp bounds what StyleGAN2-ADA clamps, and fp16 sets it to 256",
          "[models][stylegan2][precision]") {
  for (DType precision : {DType::f32, DType::bf16, DType::f16}) {
    auto model = make_gan(GanConfig{.model = "stylegan2", .precision = precision});
    auto& g = static_cast<StyleGan2Generator&>(*model->generator);
    auto& d = static_cast<StyleGan2Discriminator&>(*model->discriminator);
    const double want = precision == DType::f16 ? 256.0 : kernels::kNoClamp;
    INFO(dtype_name(precision));
    CHECK(g.conv_clamp == want);
    CHECK(d.conv_clamp == want);
    CHECK(d.block28->conv_clamp == want);
    CHECK(d.block14->conv_clamp == want);
  }
  NoGradGuard no_grad;
  const double c = 0.05;  // small enough to act on some of every clamped layer's values
  auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 4});
  auto& g = static_cast<StyleGan2Generator&>(*model->generator);
  auto& d = static_cast<StyleGan2Discriminator&>(*model->discriminator);
  Variable z(normal({4, model->noise_dim()}, 7));
  // G: every toRGB output within [-c, c], with values at the bound; the clamped synthesis
  // convs change what the toRGBs see.
  const std::vector<Variable> free_rgb = g.rgb_outputs(g.styles(z), z);
  g.conv_clamp = c;
  const std::vector<Variable> rgb = g.rgb_outputs(g.styles(z), z);
  for (size_t s = 0; s < rgb.size(); ++s) {
    INFO("stage " << s);
    double largest = 0;
    for (double v : rgb[s].data().to_vector()) largest = std::max(largest, std::abs(v));
    CHECK(largest == Approx(c).epsilon(1e-6));
    CHECK(max_abs_difference(rgb[s].data(), free_rgb[s].data()) > 0);
  }
  // D: the same as composing its layers by hand with the clamp after fromRGB's, the blocks'
  // two convs' and the 7x7 conv's activations, and none on the skips and the fc.
  Variable x(normal({4, 1, 28, 28}, 8));
  const Tensor free_logits = d.forward(x).data();
  d.set_conv_clamp(c);
  const nn::StyleGanActivation act, clamped{.clamp = c};
  const Tensor f = setup_separable_filter({1, 3, 3, 1}, DType::f32, x.device());  // as the blocks' filter
  auto block = [&](StyleGan2DBlock& b, const Variable& h) {
    Variable skip = b.skip->forward(downsample2d(h, f));
    Variable y = nn::stylegan_activation(b.conv0->forward(h), clamped);
    y = nn::stylegan_activation(b.conv1->forward(downsample2d(y, f)), clamped);
    return scale(add(y, skip), 1.0 / std::sqrt(2.0));
  };
  Variable h = nn::stylegan_activation(d.from_rgb->forward(x), clamped);
  h = block(*d.block14, block(*d.block28, h));
  h = nn::minibatch_stddev(h, stylegan2_stddev_group(4), 1);
  h = nn::stylegan_activation(d.conv->forward(h), clamped);
  h = nn::stylegan_activation(d.fc->forward(flatten(h)), act);
  const Tensor by_hand = d.out->forward(h).data();
  const Tensor logits = d.forward(x).data();
  const Tensor again = d.forward(x).data();
  CHECK(logits.to_vector() == again.to_vector());
  CHECK(logits.to_vector() == by_hand.to_vector());
  CHECK(max_abs_difference(logits, free_logits) > 0);
}
