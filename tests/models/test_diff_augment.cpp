// DiffAugment's ops against direct loops on small images, their gradients (first and
// second order, R1's) against finite differences, the per-sample parameters' global-batch
// split, and the gates of p.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "autograd/grad.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "models/adaptive_augment.h"
#include "models/diff_augment.h"
#include "runtime/dist/thread_process_group.h"

using namespace tandem;
using namespace tandem::models;

namespace {

constexpr int64_t kN = 2, kC = 3, kH = 6, kW = 5;

// x[n, c, i, j] as a flat index.
int64_t at(int64_t n, int64_t c, int64_t i, int64_t j) { return ((n * kC + c) * kH + i) * kW + j; }

Variable images(uint64_t seed) { return random_input({kN, kC, kH, kW}, seed); }

// S(x) = <v, grad_x sum(w * op(x)^2)>: a scalar from the first-order gradient.
Variable probe(const std::function<Variable(const Variable&)>& op, const Variable& x, bool create_graph) {
  Variable y = op(x);
  Variable g =
      grad({sum(square(y) * random_input(y.shape(), 99))}, {x}, {}, {.create_graph = create_graph})[0];
  return sum(g * random_input(x.shape(), 98));
}

void require_gradients(const std::function<Variable(const Variable&)>& op, uint64_t seed) {
  const GradcheckResult r =
      gradcheck([&](const std::vector<Variable>& in) { return op(in[0]); }, {images(seed)});
  INFO(r.report);
  REQUIRE(r.max_relative_error < 1e-6);
  // Second order (R1's): grad of S through the double backward against central differences
  // of S computed with the plain first-order backward.
  const Variable x = images(seed + 1);
  const std::vector<double> analytic = grad({probe(op, x, true)}, {x})[0].data().to_vector();
  std::vector<double> xv = x.data().to_vector();
  const double eps = 1e-6;
  double worst = 0;
  for (size_t k = 0; k < xv.size(); ++k) {
    auto at_shift = [&](double d) {
      std::vector<double> shifted = xv;
      shifted[k] += d;
      return probe(op, Variable(Tensor::from_values(x.shape(), shifted, DType::f64), true), false).item();
    };
    const double numeric = (at_shift(eps) - at_shift(-eps)) / (2 * eps);
    worst = std::max(worst, std::abs(analytic[k] - numeric) / std::max(1.0, std::abs(numeric)));
  }
  REQUIRE(worst < 1e-6);
}

// Full-policy parameters that apply every group, with shifts and cutouts that differ per sample.
Tensor all_on_uniforms() {
  // Dyadic values, exact in float32, so that the parameters below are exact too.
  return Tensor::from_values({kN, kAugmentUniforms},
                             {0.125, 0.875, 0.25, 0.625, 0.25, 0.0625, 0.9375, 0.375, 0.0,   0.75,  //
                              0.5,   0.25,  0.75, 0.125, 0.75, 0.9375, 0.25,   0.625, 0.875, 0.125});
}

}  // namespace

TEST_CASE("augmentation policies parse in any order into the canonical one", "[augment]") {
  CHECK(parse_augment_policy("translation,cutout,color").str() == "color,translation,cutout");
  CHECK(parse_augment_policy("cutout").str() == "cutout");
  CHECK(parse_augment_policy("").str() == "none");
  CHECK_THROWS_WITH(parse_augment_policy("color,flip"), Catch::Contains("'flip'"));
  CHECK_THROWS_WITH(parse_augment_policy("color,color"), Catch::Contains("named twice"));
}

TEST_CASE("color: brightness, saturation and contrast follow their formulas per sample", "[augment]") {
  const Variable x = images(1);
  const std::vector<double> xv = x.data().to_vector();
  const std::vector<double> b = {0.25, -0.4}, s = {1.5, 0.2}, c = {0.7, 1.3};
  const std::vector<double> bright = brightness(x, b).data().to_vector();
  const std::vector<double> sat = saturation(x, s).data().to_vector();
  const std::vector<double> con = contrast(x, c).data().to_vector();
  for (int64_t n = 0; n < kN; ++n) {
    double sample_mean = 0;
    for (int64_t k = 0; k < kC * kH * kW; ++k) sample_mean += xv[n * kC * kH * kW + k];
    sample_mean /= kC * kH * kW;
    for (int64_t i = 0; i < kH; ++i) {
      for (int64_t j = 0; j < kW; ++j) {
        double pixel_mean = 0;
        for (int64_t ch = 0; ch < kC; ++ch) pixel_mean += xv[at(n, ch, i, j)] / kC;
        for (int64_t ch = 0; ch < kC; ++ch) {
          const double v = xv[at(n, ch, i, j)];
          CHECK(bright[at(n, ch, i, j)] == Approx(v + b[n]).margin(1e-12));
          CHECK(sat[at(n, ch, i, j)] == Approx((v - pixel_mean) * s[n] + pixel_mean).margin(1e-12));
          CHECK(con[at(n, ch, i, j)] == Approx((v - sample_mean) * c[n] + sample_mean).margin(1e-12));
        }
      }
    }
  }
}

TEST_CASE("translate shifts each sample by its own offsets with zeros from outside", "[augment]") {
  const Variable x = images(2);
  const std::vector<double> xv = x.data().to_vector();
  const std::vector<int64_t> dy = {1, -2}, dx = {-1, 3};
  const std::vector<double> out = translate(x, dy, dx).data().to_vector();
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t ch = 0; ch < kC; ++ch) {
      for (int64_t i = 0; i < kH; ++i) {
        for (int64_t j = 0; j < kW; ++j) {
          const int64_t si = i + dy[n], sj = j + dx[n];
          const bool inside = si >= 0 && si < kH && sj >= 0 && sj < kW;
          INFO(n << " " << ch << " " << i << " " << j);
          CHECK(out[at(n, ch, i, j)] == (inside ? xv[at(n, ch, si, sj)] : 0.0));
        }
      }
    }
  }
}

TEST_CASE("cutout zeroes each sample's square, clipped to the image, and nothing else", "[augment]") {
  const Variable x = images(3);
  const std::vector<double> xv = x.data().to_vector();
  const std::vector<int64_t> top = {-1, 3}, left = {2, 0};
  const std::vector<double> out = cutout(x, top, left, 3, 2).data().to_vector();
  int64_t zeroed = 0;
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t ch = 0; ch < kC; ++ch) {
      for (int64_t i = 0; i < kH; ++i) {
        for (int64_t j = 0; j < kW; ++j) {
          const bool cut = i >= top[n] && i < top[n] + 3 && j >= left[n] && j < left[n] + 2;
          zeroed += cut;
          CHECK(out[at(n, ch, i, j)] == (cut ? 0.0 : xv[at(n, ch, i, j)]));
        }
      }
    }
  }
  CHECK(zeroed == kC * (2 * 2 + 3 * 2));  // sample 0's square loses its row above the image
}

TEST_CASE("diff_augment is color, then translation, then cutout with DiffAugment's ranges", "[augment]") {
  const Variable x = images(4);
  const Tensor u = all_on_uniforms();
  const AugmentPolicy all = parse_augment_policy("color,translation,cutout");
  // By hand from the uniforms: shifts up to int(6/8 + .5) = 1 row and int(5/8 + .5) = 1 column
  // (floor(u * 3) - 1); a 3x3 cutout (int(6/2 + .5), int(5/2 + .5)) whose top is
  // floor(u * 6) - 1 and left floor(u * 5) - 1.
  Variable expected = contrast(saturation(brightness(x, {0.375, -0.25}), {0.5, 1.5}), {1.125, 0.625});
  expected = translate(expected, {-1, 1}, {1, -1});
  expected = cutout(expected, {-1, 4}, {2, -1}, 3, 3);
  const Variable got = diff_augment(x, all, 1.0, u);
  CHECK(std::memcmp(got.data().raw_data(), expected.data().raw_data(), got.data().bytes()) == 0);
  // p gates each group per sample: at p = 0.45 sample 0 gets color, translation and cutout
  // (gates 0.125, 0.25, 0.375), sample 1 none of them (0.5, 0.75, 0.625).
  Variable gated = contrast(saturation(brightness(x, {0.375, 0.0}), {0.5, 1.0}), {1.125, 1.0});
  gated = cutout(translate(gated, {-1, 0}, {1, 0}), {-1, kH}, {2, kW}, 3, 3);
  CHECK(std::memcmp(diff_augment(x, all, 0.45, u).data().raw_data(), gated.data().raw_data(),
                    gated.data().bytes()) == 0);
  // p = 0: the images themselves.
  CHECK(std::memcmp(diff_augment(x, all, 0.0, u).data().raw_data(), x.data().raw_data(), x.data().bytes()) ==
        0);
}

TEST_CASE("the augmentations' gradients, first and second order, match finite differences", "[augment]") {
  require_gradients([](const Variable& x) { return brightness(x, {0.3, -0.2}); }, 10);
  require_gradients([](const Variable& x) { return saturation(x, {1.7, 0.4}); }, 12);
  require_gradients([](const Variable& x) { return contrast(x, {0.6, 1.4}); }, 14);
  require_gradients([](const Variable& x) { return translate(x, {1, -1}, {-1, 2}); }, 16);
  require_gradients([](const Variable& x) { return cutout(x, {1, 4}, {0, 3}, 3, 3); }, 18);
  const AugmentPolicy all = parse_augment_policy("color,translation,cutout");
  require_gradients([&](const Variable& x) { return diff_augment(x, all, 1.0, all_on_uniforms()); }, 20);
}

TEST_CASE("W ranks' augmentation parameters are the rows of one process's global draw", "[augment]") {
  for (int world = 1; world <= 4; ++world) {
    const int64_t rows = 3;
    const Tensor global = augment_uniforms(7, 5, kAugmentFake, 0, world * rows, world * rows);
    for (int r = 0; r < world; ++r) {
      const Tensor mine = augment_uniforms(7, 5, kAugmentFake, r * rows, rows, world * rows);
      const Tensor expected = global.narrow_rows(r * rows, rows).clone();
      CHECK(std::memcmp(mine.raw_data(), expected.raw_data(), mine.bytes()) == 0);
    }
  }
  // Each call and each iteration is a stream of its own.
  const std::vector<double> base = augment_uniforms(7, 5, kAugmentReal, 0, 2, 2).to_vector();
  CHECK(base != augment_uniforms(7, 5, kAugmentFake, 0, 2, 2).to_vector());
  CHECK(base != augment_uniforms(7, 6, kAugmentReal, 0, 2, 2).to_vector());
  // DiffAugment takes rank r's rows: rank 1 of 2 augments as one process does its rows 2..3.
  const AugmentPolicy all = parse_augment_policy("color,translation,cutout");
  const Variable x = random_input({4, 1, 8, 8}, 3);
  const Variable one = DiffAugment(all, 7, 0, 1)(x, 5, kAugmentReal);
  const Variable mine =
      DiffAugment(all, 7, 1, 2)(Variable(x.data().narrow_rows(2, 2).clone()), 5, kAugmentReal);
  const Tensor expected = one.data().narrow_rows(2, 2).clone();
  CHECK(std::memcmp(mine.data().raw_data(), expected.raw_data(), expected.bytes()) == 0);
}

namespace {

// Rank r's sum of sign(D(real)) at iteration i, out of kCount outputs: differs per rank, so
// that a p taken from one rank's counts alone differs from the global one.
constexpr double kCount = 3;
double signs_of(int rank, int64_t i) { return static_cast<double>((rank * 3 + i * 5) % 7) - 3.0; }

// p after each interval, from the global counts by hand.
std::vector<double> expected_p(int ranks, int64_t iterations, double target, double step) {
  std::vector<double> out;
  double p = 0, sum = 0, count = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    for (int r = 0; r < ranks; ++r) sum += signs_of(r, i), count += kCount;
    if ((i + 1) % AdaptiveAugment::kInterval != 0) continue;
    const double signal = sum / count - target;
    p = std::clamp(p + (signal > 0 ? step : signal < 0 ? -step : 0.0), 0.0, 1.0);
    out.push_back(p);
    sum = count = 0;
  }
  return out;
}

}  // namespace

TEST_CASE("adaptive p: StyleGAN2-ADA's step, moved by the global sign, the same on every rank bitwise",
          "[augment]") {
  CHECK(ada_step(64, 500) == 64.0 * 4 / 500000);
  constexpr int64_t kIterations = 40;
  const double step = 0.125, target = 0.05;
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const std::vector<double> expected = expected_p(ranks, kIterations, target, step);
    REQUIRE(std::any_of(expected.begin(), expected.end(), [](double p) { return p > 0 && p < 1; }));
    std::vector<std::vector<double>> got(static_cast<size_t>(ranks));
    std::vector<Tensor> state(static_cast<size_t>(ranks));
    dist::run_ranks(ranks, [&](std::shared_ptr<dist::ProcessGroup> group) {
      const int r = group->rank();
      AdaptiveAugment ada(target, step);
      for (int64_t i = 0; i < kIterations; ++i) {
        ada.observe(signs_of(r, i), kCount);
        ada.end_iteration(i + 1, /*flush=*/i % 7 == 2, *group);  // flushes inside intervals change nothing
        if ((i + 1) % AdaptiveAugment::kInterval == 0) got[static_cast<size_t>(r)].push_back(ada.p());
        if (i == 30) state[static_cast<size_t>(r)] = ada.state()[0].clone();  // flushed: the global counts
      }
    });
    for (int r = 0; r < ranks; ++r) {
      INFO(ranks << " ranks, rank " << r);
      CHECK(got[static_cast<size_t>(r)] == expected);
      CHECK(std::memcmp(state[static_cast<size_t>(r)].raw_data(), state[0].raw_data(), state[0].bytes()) ==
            0);
    }
  }
}
