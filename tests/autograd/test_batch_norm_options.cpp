// BatchNorm's PyTorch options and shapes: BatchNorm1d on [N, C, L] against hand values,
// affine = false (no weight or bias), track_running_stats = false (no buffers, batch
// statistics in eval mode too, with a float64 gradcheck), and the shape errors. The
// functional batch_norm's gradchecks on [N, C, L] are in test_gradcheck_conv.cpp.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn.h"
#include "autograd/ops.h"

using namespace tandem;

namespace {

constexpr double kTolerance = 1e-6;

void require_close(const GradcheckResult& r) {
  INFO(r.report);
  CHECK(r.max_relative_error < kTolerance);
}

void require_values(const Tensor& t, const std::vector<double>& want) {
  std::vector<double> got = t.to_vector();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-6));
  }
}

}  // namespace

TEST_CASE("BatchNorm1d on [N, C, L] normalises each channel over N and L (hand values)", "[norm][module]") {
  nn::BatchNorm1d bn(2, 0.0, 0.1);  // eps 0: the hand values stay round
  bn.weight.data().copy_(Tensor::from_values({2}, {2.0, 1.0}));
  bn.bias.data().copy_(Tensor::from_values({2}, {1.0, 0.0}));
  // x [2, 2, 2]: channel 0 holds 1, 2 | 3, 6 (mean 3, biased variance 3.5, unbiased 14/3);
  // channel 1 holds 0, 4 | 4, 0 (mean 2, biased variance 4, unbiased 16/3).
  Tensor x = Tensor::from_values({2, 2, 2}, {1, 2, 0, 4, 3, 6, 4, 0});
  Tensor y = bn.forward(Variable(x)).data();
  const double s = std::sqrt(3.5);
  require_values(y, {2 * (1 - 3) / s + 1, 2 * (2 - 3) / s + 1, -1, 1, 1, 2 * 3 / s + 1, 1, -1});
  require_values(bn.running_mean, {0.3, 0.2});
  require_values(bn.running_var, {0.9 + 0.1 * 14 / 3, 0.9 + 0.1 * 16 / 3});
  // Eval mode uses the running statistics on [N, C, L] too.
  bn.eval();
  Tensor e = bn.forward(Variable(x)).data();
  const double sd = std::sqrt(0.9 + 0.1 * 14 / 3);
  CHECK(e.to_vector()[0] == Approx(2 * (1 - 0.3) / sd + 1).epsilon(1e-6));
}

TEST_CASE("BatchNorm with affine = false has no weight or bias", "[norm][module]") {
  nn::BatchNorm2d bn(3, {.affine = false});
  CHECK_FALSE(bn.weight.defined());
  CHECK_FALSE(bn.bias.defined());
  CHECK(bn.parameters().empty());
  CHECK(bn.named_buffers().size() == 2);
  CHECK(bn.state_dict().size() == 2);  // running_mean, running_var
  Variable x = random_input({2, 3, 2, 2}, 30);
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  Tensor want = batch_norm(x, Variable(), Variable(), rm, rv, true).data();
  // The module's buffers are float32: compare with the float64 functional form loosely.
  Tensor got = bn.forward(Variable(x.data().to(DType::f32))).data();
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).margin(1e-5));
}

TEST_CASE(
    "BatchNorm with track_running_stats = false keeps no buffers and uses batch statistics in eval mode",
    "[norm][module]") {
  nn::BatchNorm1d bn(3, {.eps = 1e-3, .affine = false, .track_running_stats = false});
  CHECK(bn.buffers().empty());
  CHECK(bn.state_dict().empty());
  CHECK_FALSE(bn.running_mean.defined());
  CHECK_FALSE(bn.running_var.defined());
  CHECK(bn.eps == 1e-3);
  for (const Shape& shape : {Shape{6, 3}, Shape{4, 3, 5}}) {
    CAPTURE(shape_str(shape));
    Variable x = random_input(shape, 31);
    Tensor none_mean, none_var;
    Tensor want = batch_norm(x, Variable(), Variable(), none_mean, none_var, true, 0.1, 1e-3).data();
    bn.train();
    Tensor train_y = bn.forward(x).data();
    bn.eval();
    Tensor eval_y = bn.forward(x).data();
    CHECK(train_y.to_vector() == want.to_vector());
    CHECK(eval_y.to_vector() == want.to_vector());
    CHECK_FALSE(bn.running_mean.defined());
    // Eval mode differentiates through the batch statistics, as training does.
    require_close(gradcheck([&](const std::vector<Variable>& in) { return bn.forward(in[0]); }, {x}));
  }
}

TEST_CASE("BatchNorm1d and BatchNorm2d name the shapes they accept", "[norm][module][errors]") {
  nn::BatchNorm1d bn1(3);
  CHECK_THROWS_WITH(bn1.forward(Variable(Tensor::zeros({2, 3, 2, 2}))),
                    Catch::Contains("BatchNorm1d(3)") && Catch::Contains("[2, 3, 2, 2]") &&
                        Catch::Contains("[N, 3] or [N, 3, L]"));
  nn::BatchNorm2d bn2(3);
  CHECK_THROWS_WITH(bn2.forward(Variable(Tensor::zeros({2, 3, 4}))),
                    Catch::Contains("BatchNorm2d(3)") && Catch::Contains("[N, 3, H, W]"));
  Tensor none;
  CHECK_THROWS_WITH(
      batch_norm(Variable(Tensor::zeros({2, 3, 2, 2, 2})), Variable(), Variable(), none, none, true),
      Catch::Contains("batch_norm") && Catch::Contains("[N, C, L]"));
}
