// StyleGAN's building blocks (autograd/nn_stylegan.h): equalised layers against their plain
// twins with the scale applied, pixel norm, minibatch standard deviation against a direct
// loop (and what N ranks equal), noise injection, gradients, named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn_stylegan.h"
#include "autograd/ops.h"
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

TEST_CASE("gradcheck: pixel_norm and minibatch_stddev", "[gradcheck][nn][stylegan]") {
  expect_gradients_match("pixel_norm", [](const std::vector<Variable>& v) { return nn::pixel_norm(v[0]); },
                         {random_input({3, 4, 2, 1}, 723)});
  expect_gradients_match("minibatch_stddev",
                         [](const std::vector<Variable>& v) { return nn::minibatch_stddev(v[0], 2); },
                         {random_input({4, 2, 2, 2}, 724)});
}
