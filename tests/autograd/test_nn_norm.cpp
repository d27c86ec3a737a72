// GroupNorm, InstanceNorm2d and LayerNorm: values against a direct loop, the statistics
// they normalise over, gradients (first order here, second in test_second_order.cpp), and
// the named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn_norm.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

// Normalises consecutive runs of `run` elements of v (biased variance), as the layers do.
std::vector<double> normalized_runs(const std::vector<double>& v, size_t run, double eps) {
  std::vector<double> out(v.size());
  for (size_t start = 0; start < v.size(); start += run) {
    double m = 0, var = 0;
    for (size_t i = 0; i < run; ++i) m += v[start + i] / static_cast<double>(run);
    for (size_t i = 0; i < run; ++i)
      var += (v[start + i] - m) * (v[start + i] - m) / static_cast<double>(run);
    for (size_t i = 0; i < run; ++i) out[start + i] = (v[start + i] - m) / std::sqrt(var + eps);
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).margin(tol));
  }
}

}  // namespace

TEST_CASE("GroupNorm and InstanceNorm2d normalise each sample's group of channels", "[nn][norm]") {
  Variable x = random_input({2, 6, 3, 2}, 700, 3.0);  // float64
  // 3 groups of 2 channels: runs of 2 * 3 * 2 = 12 elements.
  check_close(nn::group_norm(x, 3, Variable(), Variable(), 1e-5).data().to_vector(),
              normalized_runs(x.data().to_vector(), 12, 1e-5), 1e-12);
  // One channel per group: each 3 x 2 plane.
  check_close(nn::group_norm(x, 6, Variable(), Variable(), 1e-5).data().to_vector(),
              normalized_runs(x.data().to_vector(), 6, 1e-5), 1e-12);
  // The modules (float32): affine starts as the identity; InstanceNorm2d has no parameters.
  nn::GroupNorm gn(3, 6);
  nn::InstanceNorm2d in(6);
  Variable x32(x.data().to(DType::f32));
  check_close(gn.forward(x32).data().to_vector(), normalized_runs(x.data().to_vector(), 12, 1e-5), 1e-5);
  check_close(in.forward(x32).data().to_vector(), normalized_runs(x.data().to_vector(), 6, 1e-5), 1e-5);
  CHECK(gn.parameters().size() == 2);
  CHECK(in.parameters().empty());
  CHECK(gn.type_name() == "GroupNorm(3, 6)");
  CHECK(in.type_name() == "InstanceNorm2d(6)");
  // A per-channel weight and bias after normalising.
  Variable w = tensor({6}, {1, 2, 3, 4, 5, 6}, false, DType::f64),
           b = tensor({6}, {0, 0, 0, 0, 0, 1}, false, DType::f64);
  const std::vector<double> plain = nn::group_norm(x, 3, Variable(), Variable()).data().to_vector();
  const std::vector<double> scaled = nn::group_norm(x, 3, w, b).data().to_vector();
  for (size_t i = 0; i < plain.size(); ++i) {
    const size_t c = (i / 6) % 6;
    CHECK(scaled[i] == Approx(plain[i] * (c + 1) + (c == 5 ? 1 : 0)).margin(1e-12));
  }
  CHECK_THROWS_WITH(nn::GroupNorm(4, 6), Catch::Contains("GroupNorm: 6 channels do not split into 4 groups"));
  CHECK_THROWS_WITH(gn.forward(Variable(Tensor::zeros({2, 4, 3}))),
                    Catch::Contains("GroupNorm(3, 6): needs [N, 6, ...], got [2, 4, 3]"));
  CHECK_THROWS_WITH(in.forward(Variable(Tensor::zeros({2, 6, 3}))),
                    Catch::Contains("InstanceNorm2d(6): needs [N, 6, H, W], got [2, 6, 3]"));
}

TEST_CASE("LayerNorm normalises each sample over its last axes", "[nn][norm]") {
  Variable x = random_input({2, 3, 4}, 701, 2.0);
  check_close(nn::layer_norm(x, {3, 4}, Variable(), Variable()).data().to_vector(),
              normalized_runs(x.data().to_vector(), 12, 1e-5), 1e-12);
  check_close(nn::layer_norm(x, {4}, Variable(), Variable(), 1e-3).data().to_vector(),
              normalized_runs(x.data().to_vector(), 4, 1e-3), 1e-12);
  nn::LayerNorm ln({4});
  CHECK(ln.parameters().size() == 2);
  CHECK(ln.weight.shape() == Shape{4});
  CHECK(nn::LayerNorm({4}, 1e-5, false).parameters().empty());
  CHECK_THROWS_WITH(ln.forward(Variable(Tensor::zeros({2, 3}))),
                    Catch::Contains("layer_norm: the last axes of [2, 3] are not [4]"));
}

TEST_CASE("gradcheck: group_norm and layer_norm with their affine parameters", "[gradcheck][nn][norm]") {
  expect_gradients_match(
      "group_norm 2 groups",
      [](const std::vector<Variable>& v) { return nn::group_norm(v[0], 2, v[1], v[2], 1e-3); },
      {random_input({2, 4, 3, 2}, 702), random_input({4}, 703), random_input({4}, 704)});
  expect_gradients_match(
      "layer_norm [3, 2]",
      [](const std::vector<Variable>& v) {
        return nn::layer_norm(v[0], {3, 2}, v[1], v[2], 1e-3);
      },
      {random_input({4, 3, 2}, 705), random_input({3, 2}, 706), random_input({3, 2}, 707)});
}
