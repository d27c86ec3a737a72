// StyleGAN2's path-length penalty (models/path_length.h) on the stylegan2 model: its value
// and running mean against the formula written out, and its loss's gradient against the
// official code's, where the running mean itself carries gradient through the batch mean.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/grad.h"
#include "autograd/ops.h"
#include "models/gan.h"
#include "models/path_length.h"
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

// StyleGAN2's loss.py, written out: the lengths, then pl_mean.lerp(lengths.mean(), decay)
// kept differentiable in the penalty.
struct Official {
  Variable penalty;
  double mean = 0.0;
};
Official official_penalty(const GanModel::StyledImages& s, double before, double decay,
                          bool mean_carries_gradient = true) {
  const double pixels = static_cast<double>(s.images.size(2) * s.images.size(3));
  Variable y(s.path_noise);
  Variable g = grad({sum(s.images * y * (1.0 / std::sqrt(pixels)))}, {s.ws}, {}, {.create_graph = true})[0];
  Variable lengths = sqrt(mean(sum(square(g), 2), 1));
  Variable m = (mean(lengths) - before) * decay + before;
  if (!mean_carries_gradient) m = m.detach();
  return {mean(square(lengths - broadcast_to(reshape(m, {1}), lengths.shape()))), m.item()};
}

}  // namespace

TEST_CASE("path length: the value, the running mean and the gradient are StyleGAN2's",
          "[models][path_length]") {
  constexpr double kDecay = 0.01, kBefore = 0.3;
  for (double decay : {kDecay, 0.5}) {  // 0.5: the mean's own gradient is large enough to matter
    INFO("decay " << decay);
    auto model = make_gan(GanConfig{.model = "stylegan2", .seed = 4});
    Variable z(normal({5, model->noise_dim()}, 11));
    GanModel::StyledImages s = model->generate_styled(z);
    REQUIRE(s.ws.shape() == Shape{5, 6, 64});
    REQUIRE(s.path_noise.shape() == Shape{5, 1, 28, 28});
    s.path_mean.fill_(kBefore);
    const Official reference = official_penalty(s, kBefore, decay);

    GanModel::StyledImages again = model->generate_styled(z);
    const PathLengthTerm term =
        path_length_penalty(again.images, again.ws, again.path_noise, again.path_mean, decay, nullptr);
    CHECK(std::abs(term.penalty - reference.penalty.item()) <= 1e-6 * std::abs(reference.penalty.item()));
    CHECK(std::abs(term.mean - reference.mean) <= 1e-7);
    CHECK(again.path_mean.item() == term.mean);  // the model's buffer, updated

    const std::vector<Variable> params = model->generator->parameters();
    auto gradients = [&](const Variable& loss) { return grad({loss}, params, {}, {.allow_unused = true}); };
    const std::vector<Variable> expected = gradients(reference.penalty), got = gradients(term.loss);
    // The penalty with its running mean taken as a constant: the mean's own gradient left out.
    const std::vector<Variable> constant_mean =
        gradients(official_penalty(model->generate_styled(z), kBefore, decay, false).penalty);
    double scale = 0, worst = 0, mean_term = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      if (!expected[i].defined()) continue;
      REQUIRE(got[i].defined());
      const auto e = expected[i].data().to_vector(), a = got[i].data().to_vector(),
                 c = constant_mean[i].data().to_vector();
      for (size_t k = 0; k < e.size(); ++k) {
        scale = std::max(scale, std::abs(e[k]));
        worst = std::max(worst, std::abs(a[k] - e[k]));
        mean_term = std::max(mean_term, std::abs(c[k] - e[k]));
      }
    }
    INFO("largest gradient " << scale << ", largest difference " << worst << ", the mean's term "
                             << mean_term);
    CHECK(scale > 0);
    CHECK(worst <= 1e-5 * scale);
    if (decay == 0.5) CHECK(mean_term > 1e-3 * scale);  // leaving the term out would be seen
  }
}

TEST_CASE("path length: models without styles refuse it, naming the model", "[models][path_length]") {
  auto model = make_gan(GanConfig{.model = "dcgan", .seed = 1});
  CHECK_THROWS_WITH(
      model->generate_styled(Variable(normal({2, model->noise_dim()}, 1))),
      Catch::Contains("dcgan: path-length regularisation needs a generator with a mapping network"));
}
