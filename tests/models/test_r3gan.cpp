// The r3gan model (models/r3gan.h): its shapes, its grouped convolutions and the fix-up
// initialisation that makes every residual block the identity at the start.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "models/gan.h"
#include "models/r3gan.h"
#include "runtime/rng.h"

using namespace tandem;
using namespace tandem::models;

namespace {

Tensor normal_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

std::shared_ptr<R3gan> make_r3gan(int64_t channels) {
  auto model = std::dynamic_pointer_cast<R3gan>(
      make_gan(GanConfig{.model = "r3gan", .seed = 5, .channels = channels}));
  REQUIRE(model != nullptr);
  return model;
}

// Each block with its input side: G's at 7, 14, 28; D's at 28, 14, 7.
std::vector<std::pair<R3ganBlock*, int64_t>> blocks_of(R3gan& model) {
  std::vector<std::pair<R3ganBlock*, int64_t>> out;
  for (size_t s = 0; s < 3; ++s) out.emplace_back(model.g().blocks[s].get(), int64_t{7} << s);
  for (size_t s = 0; s < 3; ++s) out.emplace_back(model.d().blocks[s].get(), int64_t{28} >> s);
  return out;
}

}  // namespace

TEST_CASE("r3gan: G maps [N, 64] to [N, C, 28, 28] and D maps that to [N, 1], for C = 1 and 3",
          "[models][r3gan]") {
  NoGradGuard no_grad;
  for (int64_t channels : {1, 3}) {
    INFO(channels << " channel(s)");
    std::shared_ptr<R3gan> model = make_r3gan(channels);
    CHECK(model->noise_dim() == 64);
    CHECK(model->sample_shape() == Shape{channels, 28, 28});
    CHECK(model->data_shape() == Shape{channels, 28, 28});
    Tensor fake = model->generate(Variable(normal_tensor({3, 64}, 1))).data();
    REQUIRE(fake.shape() == Shape{3, channels, 28, 28});
    for (double v : fake.to_vector()) REQUIRE(std::isfinite(v));
    CHECK(model->discriminate(Variable(fake)).data().shape() == Shape{3, 1});
    CHECK(model->g().to_image->weight.shape() == Shape{channels, 16, 1, 1});
    CHECK(model->d().from_image->weight.shape() == Shape{16, channels, 1, 1});
  }
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "r3gan", .width = 8}),
                    Catch::Contains("--width applies to the dcgan64 model only"));
}

TEST_CASE("r3gan: each block's 3x3 convolution is grouped, 16 channels a group", "[models][r3gan]") {
  std::shared_ptr<R3gan> model = make_r3gan(1);
  for (auto [block, side] : blocks_of(*model)) {
    const int64_t channels = block->expand->in_channels;
    const int64_t wide = channels * R3gan::kExpansion;
    INFO(block->path() << ": " << channels << " channels");
    CHECK(block->expand->weight.shape() == Shape{wide, channels, 1, 1});
    CHECK(block->grouped->weight.shape() == Shape{wide, R3gan::kGroupWidth, 3, 3});
    CHECK(block->grouped->params.groups == wide / R3gan::kGroupWidth);
    CHECK(block->project->weight.shape() == Shape{channels, wide, 1, 1});
    CHECK_FALSE(block->project->bias.defined());
  }
  // The grouping at work: input in group 0's channels alone leaves group 1's outputs at
  // their bias (0 at initialisation).
  R3ganBlock& block = *model->g().blocks[0];
  NoGradGuard no_grad;
  Tensor x = Tensor::zeros({1, 128, 5, 5});
  const std::vector<double> group0 = normal_tensor({16 * 25}, 3).to_vector();
  for (size_t i = 0; i < group0.size(); ++i)
    x.data<float>()[i] = static_cast<float>(group0[i]);  // channels 0-15
  std::vector<double> y = block.grouped->forward(Variable(x)).data().to_vector();
  size_t group0_nonzero = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const bool in_group0 = i / 25 < 16;  // [1, 128, 5, 5]: channel i / 25
    if (in_group0) {
      group0_nonzero += y[i] != 0.0;
    } else {
      REQUIRE(y[i] == 0.0);
    }
  }
  CHECK(group0_nonzero > 16 * 25 / 2);
}

TEST_CASE("r3gan: fix-up initialisation makes every residual block the identity, exactly",
          "[models][r3gan]") {
  std::shared_ptr<R3gan> model = make_r3gan(1);
  NoGradGuard no_grad;
  uint64_t seed = 10;
  for (auto [block, side] : blocks_of(*model)) {
    const int64_t channels = block->expand->in_channels;
    INFO(block->path() << ": " << channels << " channels at " << side << "x" << side);
    Tensor x = normal_tensor({2, channels, side, side}, ++seed);
    Tensor y = block->forward(Variable(x)).data();
    REQUIRE(y.shape() == x.shape());
    CHECK(y.to_vector() == x.to_vector());
    // The branch before its last convolution is not zero: the identity is the fix-up's.
    Tensor branch = block->grouped->forward(block->expand->forward(Variable(x))).data();
    size_t nonzero = 0;
    for (double v : branch.to_vector()) nonzero += v != 0.0;
    CHECK(nonzero > static_cast<size_t>(branch.numel()) / 2);
  }
}
