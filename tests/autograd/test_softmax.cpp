// max/min along an axis, logsumexp, log_softmax, softmax, nll_loss and cross_entropy: values
// against direct formulas, stability at large inputs, gradients against finite differences
// (first order here; second order in test_second_order.cpp), and the named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

Tensor labels(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::i64);
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

}  // namespace

TEST_CASE("softmax and log_softmax: rows of probabilities, stable at large logits", "[softmax]") {
  Variable x = tensor({2, 3}, {1.0, 2.0, 3.0, 1000.0, 1001.0, 999.0}, false, DType::f64);
  const std::vector<double> p = softmax(x, 1).data().to_vector();
  const std::vector<double> lp = log_softmax(x, -1).data().to_vector();
  // Row 0 by the direct formula; row 1 is row 0 shifted, so its probabilities are {e, e^2, 1}/sum.
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (int k = 0; k < 3; ++k) CHECK(p[k] == Approx(std::exp(1.0 + k) / z).epsilon(1e-14));
  const double z1 = std::exp(1.0) + std::exp(2.0) + 1.0;
  CHECK(p[3] == Approx(std::exp(1.0) / z1).epsilon(1e-12));
  CHECK(lp[5] == Approx(-std::log(z1)).epsilon(1e-12));  // finite: no overflow at 1000
  CHECK(p[0] + p[1] + p[2] == Approx(1.0).epsilon(1e-15));
  // logsumexp of a row of -inf is -inf, not NaN.
  Variable low = tensor({1, 2}, {-INFINITY, -INFINITY}, false, DType::f64);
  CHECK(std::isinf(logsumexp(low, 1).item()));
  CHECK(logsumexp(x, 1, true).shape() == Shape{2, 1});
}

TEST_CASE("max and min along an axis: values, positions, and the gradient to the position", "[softmax]") {
  Variable x = tensor({2, 3}, {1.0, 5.0, 2.0, 7.0, -1.0, 0.0}, true, DType::f64);
  AxisExtreme top = max(x, 1);
  CHECK(top.values.data().to_vector() == std::vector<double>{5.0, 7.0});
  CHECK(top.indices.data<int64_t>()[0] == 1);
  CHECK(top.indices.data<int64_t>()[1] == 0);
  sum(top.values).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 1, 0, 1, 0, 0});
  CHECK(min(x, 0, true).values.shape() == Shape{1, 3});
  CHECK(min(x, 0).values.data().to_vector() == std::vector<double>{1.0, -1.0, 0.0});
}

TEST_CASE("cross_entropy and nll_loss: -log p[target], PyTorch's label smoothing, reductions", "[softmax]") {
  Variable logits = tensor({2, 3}, {0.5, -1.0, 2.0, 1.0, 1.0, 0.0}, false, DType::f64);
  const Tensor target = labels({2, 0});
  auto lp = [](const std::vector<double>& row, int k) {
    double z = 0;
    for (double v : row) z += std::exp(v);
    return row[static_cast<size_t>(k)] - std::log(z);
  };
  const double l0 = -lp({0.5, -1.0, 2.0}, 2), l1 = -lp({1.0, 1.0, 0.0}, 0);
  CHECK(cross_entropy(logits, target).item() == Approx((l0 + l1) / 2).epsilon(1e-14));
  CHECK(cross_entropy(logits, target, {.reduction = Reduction::sum}).item() ==
        Approx(l0 + l1).epsilon(1e-14));
  const std::vector<double> rows =
      cross_entropy(logits, target, {.reduction = Reduction::none}).data().to_vector();
  CHECK(rows[0] == Approx(l0).epsilon(1e-14));
  CHECK(nll_loss(log_softmax(logits, 1), target).item() == Approx((l0 + l1) / 2).epsilon(1e-14));
  // Smoothing s: (1 - s) * nll + s * mean over classes of -log p.
  const double s = 0.1;
  double smooth0 = 0, smooth1 = 0;
  for (int k = 0; k < 3; ++k) {
    smooth0 -= lp({0.5, -1.0, 2.0}, k) / 3;
    smooth1 -= lp({1.0, 1.0, 0.0}, k) / 3;
  }
  const double want = ((1 - s) * l0 + s * smooth0 + (1 - s) * l1 + s * smooth1) / 2;
  CHECK(cross_entropy(logits, target, {.label_smoothing = s}).item() == Approx(want).epsilon(1e-14));
  // Named errors.
  CHECK_THROWS_WITH(cross_entropy(logits, labels({2, 3})),
                    Catch::Contains("cross_entropy: target 3 (row 1) is not a class of [0, 3)"));
  CHECK_THROWS_WITH(cross_entropy(logits, labels({1})),
                    Catch::Contains("cross_entropy: needs int64 targets [2]"));
  CHECK_THROWS_WITH(nll_loss(tensor({3}, {1, 2, 3}), labels({0})),
                    Catch::Contains("nll_loss: needs [N, C] scores"));
  CHECK_THROWS_WITH(cross_entropy(logits, target, {.label_smoothing = 1.5}),
                    Catch::Contains("label_smoothing 1.5 is not in [0, 1]"));
}

TEST_CASE("gradcheck: max, min, logsumexp, log_softmax, softmax, nll_loss and cross_entropy",
          "[gradcheck][softmax]") {
  auto input = [](uint64_t seed) { return std::vector<Variable>{random_input({3, 4}, seed)}; };
  expect_gradients_match(
      "max axis 1", [](const std::vector<Variable>& v) { return max(v[0], 1).values; }, input(500));
  expect_gradients_match(
      "min axis 0", [](const std::vector<Variable>& v) { return min(v[0], 0, true).values; }, input(501));
  expect_gradients_match(
      "logsumexp", [](const std::vector<Variable>& v) { return logsumexp(v[0], 1); }, input(502));
  expect_gradients_match(
      "logsumexp axis 0", [](const std::vector<Variable>& v) { return logsumexp(v[0], 0, true); },
      input(503));
  expect_gradients_match(
      "log_softmax", [](const std::vector<Variable>& v) { return log_softmax(v[0], 1); }, input(504));
  expect_gradients_match(
      "softmax", [](const std::vector<Variable>& v) { return softmax(v[0], 0); }, input(505));
  const Tensor target = labels({3, 0, 1});
  expect_gradients_match(
      "cross_entropy", [target](const std::vector<Variable>& v) { return cross_entropy(v[0], target); },
      input(506));
  expect_gradients_match(
      "cross_entropy smoothed, summed",
      [target](const std::vector<Variable>& v) {
        return cross_entropy(v[0], target, {.reduction = Reduction::sum, .label_smoothing = 0.2});
      },
      input(507));
  expect_gradients_match(
      "nll_loss", [target](const std::vector<Variable>& v) { return nll_loss(v[0], target); }, input(508));
}
