// StyleGAN's building blocks (autograd/nn_stylegan.h): equalised layers against their plain
// twins with the scale applied, pixel norm, minibatch standard deviation against a direct
// loop (and what N ranks equal), noise injection, the modulated convolution against a
// per-sample conv2d with explicitly modulated weights, gradients, named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/init.h"
#include "autograd/nn_stylegan.h"
#include "autograd/ops.h"
#include "kernels/conv.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

// minibatch_stddev's appended channel for x [N, C, H, W] by a direct loop (F = 1).
std::vector<double> stddev_channel(const Tensor& x, int64_t group_size) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  const int64_t g = std::min(group_size, n), groups = n / g;
  const std::vector<double> v = x.to_vector();
  std::vector<double> out(static_cast<size_t>(n * hw));
  for (int64_t m = 0; m < groups; ++m) {
    double total = 0;
    for (int64_t e = 0; e < c * hw; ++e) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < g; ++j) mean += v[static_cast<size_t>((j * groups + m) * c * hw + e)] / g;
      for (int64_t j = 0; j < g; ++j) {
        const double d = v[static_cast<size_t>((j * groups + m) * c * hw + e)] - mean;
        var += d * d / g;
      }
      total += std::sqrt(var + 1e-8) / static_cast<double>(c * hw);
    }
    for (int64_t j = 0; j < g; ++j)
      for (int64_t p = 0; p < hw; ++p) out[static_cast<size_t>((j * groups + m) * hw + p)] = total;
  }
  return out;
}

// Channel `k` of x [N, C, H, W], flattened.
std::vector<double> channel(const Tensor& x, int64_t k) {
  const int64_t n = x.size(0), c = x.size(1), hw = x.size(2) * x.size(3);
  const std::vector<double> v = x.to_vector();
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p) out.push_back(v[static_cast<size_t>((i * c + k) * hw + p)]);
  return out;
}

}  // namespace

TEST_CASE("equalised layers: N(0, 1 / lr_mul^2) weights used at gain * lr_mul / sqrt(fan_in)",
          "[nn][stylegan]") {
  Generator gen(3);
  nn::EqualizedLinear fc(64, 32, {.bias_init = 1.0, .lr_multiplier = 0.01}, gen);
  const std::vector<double> w = fc.weight.data().to_vector();
  double sq = 0;
  for (double e : w) sq += e * e / static_cast<double>(w.size());
  CHECK(std::sqrt(sq) == Approx(100.0).epsilon(0.05));  // 2048 draws of N(0, 100^2)
  CHECK(fc.bias.data().to_vector() == std::vector<double>(32, 1.0));
  Variable x = randn({5, 64}, gen);
  const Variable want = linear(x, scale(fc.weight, 0.01 / 8.0), scale(fc.bias, 0.01));
  check_close(fc.forward(x).data().to_vector(), want.data().to_vector(), 1e-6);
  nn::EqualizedConv2d conv(3, 4, 3, 1, 1, {.gain = std::sqrt(2.0)}, gen);
  Variable img = randn({2, 3, 5, 5}, gen);
  const Variable direct = conv2d(img, scale(conv.weight, std::sqrt(2.0 / 27.0)), conv.bias, {1, 1, 0});
  check_close(conv.forward(img).data().to_vector(), direct.data().to_vector(), 1e-5);
  CHECK(conv.parameters().size() == 2);
  CHECK_THROWS_WITH(nn::EqualizedLinear(4, 4, {.lr_multiplier = 0.0}),
                    Catch::Contains("EqualizedLinear: lr_multiplier must be a positive number, got 0"));
}

TEST_CASE("pixel_norm gives each sample a unit mean square over its channels", "[nn][stylegan]") {
  Variable z = random_input({3, 8}, 720, 5.0);
  const std::vector<double> v = nn::pixel_norm(z).data().to_vector();
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int k = 0; k < 8; ++k)
      ms += v[static_cast<size_t>(r * 8 + k)] * v[static_cast<size_t>(r * 8 + k)] / 8;
    CHECK(ms == Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("minibatch_stddev appends each group's standard deviation; what N ranks equal", "[nn][stylegan]") {
  Variable x = random_input({8, 3, 2, 2}, 721);
  const Variable out = nn::minibatch_stddev(x, 4);
  REQUIRE(out.shape() == Shape{8, 4, 2, 2});
  check_close(channel(out.data(), 3), stddev_channel(x.data(), 4), 1e-12);
  check_close(channel(out.data(), 0), channel(x.data(), 0), 0.0);  // x passes through
  // A group larger than the batch is the whole batch.
  check_close(channel(nn::minibatch_stddev(x, 32).data(), 3), stddev_channel(x.data(), 8), 1e-12);
  // 2 ranks of 4 samples each form groups inside their slice: they equal one process that
  // applies the layer slice by slice, not one that applies it to all 8 at once.
  std::vector<double> per_slice;
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<double> part = channel(nn::minibatch_stddev(slice(x, 0, 4 * r, 4), 4).data(), 3);
    per_slice.insert(per_slice.end(), part.begin(), part.end());
  }
  const std::vector<double> whole = channel(out.data(), 3);
  check_close(
      per_slice,
      channel(
          concat({nn::minibatch_stddev(slice(x, 0, 0, 4), 4), nn::minibatch_stddev(slice(x, 0, 4, 4), 4)}, 0)
              .data(),
          3),
      0.0);
  double apart = 0;
  for (size_t i = 0; i < whole.size(); ++i) apart = std::max(apart, std::abs(whole[i] - per_slice[i]));
  CHECK(apart > 1e-3);
  CHECK_THROWS_WITH(nn::minibatch_stddev(random_input({6, 3, 2, 2}, 722), 4),
                    Catch::Contains("minibatch_stddev: a batch of 6 does not split into groups of 4"));
}

TEST_CASE("NoiseInjection adds strength times noise; strength learns from it", "[nn][stylegan]") {
  nn::NoiseInjection inject;
  CHECK(inject.strength.data().to_vector() == std::vector<double>{0.0});
  Variable x = randn({2, 3, 2, 2});
  CHECK(inject.forward(x).data().to_vector() == x.data().to_vector());  // strength 0 at first
  Tensor noise = randn({2, 1, 2, 2}).data();
  sum(inject.forward(x, noise)).backward();
  // d/dstrength sum(x + s * noise) = 3 channels x sum(noise).
  double total = 0;
  for (double e : noise.to_vector()) total += 3 * e;
  CHECK(inject.strength.grad().item() == Approx(total).epsilon(1e-5));
  CHECK_THROWS_WITH(inject.forward(x, randn({2, 3, 2, 2}).data()),
                    Catch::Contains("NoiseInjection: noise [2, 3, 2, 2] for input [2, 3, 2, 2]"));
}

TEST_CASE("NoiseInjection draws from a stream of its own, which outlives the generator that seeded it",
          "[nn][stylegan]") {
  // It used to keep a pointer to `gen`: a layer made inside a factory read freed memory.
  auto make = [](uint64_t seed) {
    Generator gen(seed);
    auto layer = std::make_shared<nn::NoiseInjection>(gen);
    layer->strength.data().fill_(1.0);
    return layer;
  };
  auto a = make(5), b = make(5), c = make(6);
  const Variable x(Tensor::zeros({2, 1, 3, 3}));
  const std::vector<double> first = a->forward(x).data().to_vector();
  CHECK(first == b->forward(x).data().to_vector());  // the same seed, the same stream
  CHECK(first != c->forward(x).data().to_vector());
  CHECK(first != a->forward(x).data().to_vector());  // a new draw at each forward
}

TEST_CASE("gradcheck: pixel_norm and minibatch_stddev", "[gradcheck][nn][stylegan]") {
  expect_gradients_match("pixel_norm", [](const std::vector<Variable>& v) { return nn::pixel_norm(v[0]); },
                         {random_input({3, 4, 2, 1}, 723)});
  expect_gradients_match("minibatch_stddev",
                         [](const std::vector<Variable>& v) { return nn::minibatch_stddev(v[0], 2); },
                         {random_input({4, 2, 2, 2}, 724)});
}

namespace {

// modulated_conv2d by a direct route: for each sample n, the weight w_n[o, c] = weight[o, c]
// styles[n, c] built element by element (and demodulated per output channel), then a plain
// conv2d of that one sample.
std::vector<double> per_sample_modulated(const Tensor& x, const Tensor& weight, const Tensor& styles,
                                         bool demodulate, const kernels::Conv2dParams& p) {
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0), kk = weight.size(2) * weight.size(3);
  const std::vector<double> wv = weight.to_vector(), sv = styles.to_vector();
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> wn(wv.size());
    for (int64_t oc = 0; oc < o; ++oc) {
      double sq = 0;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t t = 0; t < kk; ++t) {
          const size_t e = static_cast<size_t>((oc * c + ch) * kk + t);
          wn[e] = wv[e] * sv[static_cast<size_t>(i * c + ch)];
          sq += wn[e] * wn[e];
        }
      if (demodulate)
        for (int64_t e = oc * c * kk; e < (oc + 1) * c * kk; ++e)
          wn[static_cast<size_t>(e)] /= std::sqrt(sq + 1e-8);
    }
    const Tensor xi =
        x.to(DType::f64).view_range(i * c * x.size(2) * x.size(3), {1, c, x.size(2), x.size(3)});
    const std::vector<double> yi =
        kernels::conv2d(xi, Tensor::from_values(weight.shape(), wn, DType::f64), p).to_vector();
    out.insert(out.end(), yi.begin(), yi.end());
  }
  return out;
}

}  // namespace

TEST_CASE("modulated_conv2d equals a per-sample conv2d with explicitly modulated weights",
          "[nn][stylegan][modulated]") {
  const Variable x = random_input({3, 4, 6, 5}, 31), weight = random_input({5, 4, 3, 3}, 32),
                 styles = random_input({3, 4}, 33);
  for (const kernels::Conv2dParams& p :
       {kernels::Conv2dParams{.padding = 1}, kernels::Conv2dParams{.stride = 2, .padding = 2, .dilation = 2}})
    for (bool demodulate : {true, false})
      for (nn::ModulatedForm form : {nn::ModulatedForm::grouped, nn::ModulatedForm::scaled}) {
        CAPTURE(p.stride, p.dilation, demodulate, form == nn::ModulatedForm::scaled);
        const Variable y = nn::modulated_conv2d(x, weight, styles, demodulate, p, form);
        const std::vector<double> want =
            per_sample_modulated(x.data(), weight.data(), styles.data(), demodulate, p);
        REQUIRE(y.shape()[0] == 3);
        REQUIRE(y.shape()[1] == 5);
        check_close(y.data().to_vector(), want, 1e-12);
      }
  // Demodulated, the output ignores the style's scale; without, it follows it.
  const Variable y = nn::modulated_conv2d(x, weight, styles, true, {.padding = 1});
  check_close(nn::modulated_conv2d(x, weight, scale(styles, 3.0), true, {.padding = 1}).data().to_vector(),
              y.data().to_vector(), 1e-6);
  check_close(nn::modulated_conv2d(x, weight, scale(styles, 3.0), false, {.padding = 1}).data().to_vector(),
              scale(nn::modulated_conv2d(x, weight, styles, false, {.padding = 1}), 3.0).data().to_vector(),
              1e-12);
}

TEST_CASE("modulated_conv2d gradients w.r.t. input, weight and styles",
          "[nn][stylegan][modulated][gradcheck]") {
  const Variable x = random_input({2, 3, 4, 4}, 34), weight = random_input({2, 3, 3, 3}, 35),
                 styles = random_input({2, 3}, 36);
  for (bool demodulate : {true, false})
    for (nn::ModulatedForm form : {nn::ModulatedForm::grouped, nn::ModulatedForm::scaled})
      expect_gradients_match(std::string(demodulate ? "modulated_conv2d demodulated" : "modulated_conv2d") +
                                 (form == nn::ModulatedForm::scaled ? ", scaled" : ", grouped"),
                             [demodulate, form](const std::vector<Variable>& v) {
                               return nn::modulated_conv2d(v[0], v[1], v[2], demodulate, {.padding = 1},
                                                           form);
                             },
                             {x, weight, styles});
}

TEST_CASE("ModulatedConv2d: affine styles (bias 1), an equalised weight, a bias; named errors",
          "[nn][stylegan][modulated]") {
  Generator gen(5);
  nn::ModulatedConv2d layer(4, 5, 3, 6, {}, gen);
  CHECK(layer.affine->bias.data().to_vector() == std::vector<double>(4, 1.0));
  CHECK(layer.weight.shape() == Shape{5, 4, 3, 3});
  CHECK(layer.parameters().size() == 4);  // affine.weight, affine.bias, weight, bias
  CHECK(layer.type_name() == "ModulatedConv2d(4, 5, 3)");
  const Variable x = randn({2, 4, 5, 5}, gen), w = randn({2, 6}, gen);
  nn::init::uniform_(layer.bias, -1.0, 1.0, gen);
  for (bool demodulate : {true, false}) {
    layer.options.demodulate = demodulate;
    CAPTURE(demodulate);
    const Tensor styles = layer.affine->forward(w).data();
    const Tensor scaled = scale(layer.weight, 1.0 / 6.0).data();  // 1 / sqrt(4 * 3 * 3)
    std::vector<double> want = per_sample_modulated(x.data(), scaled, styles, demodulate, {.padding = 1});
    const std::vector<double> b = layer.bias.data().to_vector();
    for (size_t e = 0; e < want.size(); ++e) want[e] += b[(e / 25) % 5];
    // Training mode runs the scaled form, eval mode the grouped one: the same function.
    for (bool training : {true, false}) {
      CAPTURE(training);
      layer.train(training);
      const Variable y = layer.forward(x, w);
      CHECK(y.shape() == Shape{2, 5, 5, 5});
      check_close(y.data().to_vector(), want, 1e-4);
    }
  }
  CHECK_THROWS_WITH(layer.forward(x), Catch::Contains("has no single-input forward"));
  CHECK_THROWS_WITH(nn::modulated_conv2d(x, layer.weight, randn({2, 3}, gen)),
                    Catch::Contains("modulated_conv2d") && Catch::Contains("[2, 4, 5, 5]") &&
                        Catch::Contains("[5, 4, 3, 3]") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(nn::modulated_conv2d(x, layer.weight, randn({2, 4}, gen), true, {.groups = 2}),
                    Catch::Contains("modulated_conv2d: params.groups must be 1"));
  // A form set in the options holds in either mode: the layer runs the free function in it.
  layer.train(true);
  for (nn::ModulatedForm form : {nn::ModulatedForm::grouped, nn::ModulatedForm::scaled}) {
    layer.options.form = form;
    const Variable want =
        add_bias(nn::modulated_conv2d(x, scale(layer.weight, 1.0 / 6.0), layer.affine->forward(w),
                                      layer.options.demodulate, {.padding = 1}, form),
                 layer.bias);
    CHECK(layer.forward(x, w).data().to_vector() == want.data().to_vector());
  }
  CHECK_THROWS_WITH(nn::ModulatedConv2d(4, 5, 3, 0),
                    Catch::Contains("ModulatedConv2d: w_dim must be positive"));
}
