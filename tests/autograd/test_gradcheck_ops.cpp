// Every differentiable op's gradient against central finite differences in float64, and
// the named errors for mismatched operands. (conv, batch norm and resampling are checked
// beside their own ops.)
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;

namespace {

using Fn = testing::GradFn;
using testing::expect_gradients_match;

// Moves values with |x| < 0.05 to ±(|x| + 0.1) so a central difference never straddles a
// kink at 0.
Variable away_from_zero(Variable v) {
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) {
    if (std::abs(p[i]) < 0.05) p[i] = p[i] < 0 ? p[i] - 0.1 : p[i] + 0.1;
  }
  return v;
}

}  // namespace

TEST_CASE("gradcheck: matmul in all four transpose combinations", "[gradcheck][linalg]") {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
      Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      expect_gradients_match("matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
                             [ta, tb](const std::vector<Variable>& v) { return matmul(v[0], v[1], ta, tb); },
                             {random_input(sa, 1), random_input(sb, 2)});
    }
  }
}

TEST_CASE("gradcheck: linear with and without bias", "[gradcheck][linalg]") {
  expect_gradients_match("linear with bias",
                         [](const std::vector<Variable>& v) { return linear(v[0], v[1], v[2]); },
                         {random_input({4, 3}, 3), random_input({5, 3}, 4), random_input({5}, 5)});
  expect_gradients_match("linear without bias",
                         [](const std::vector<Variable>& v) { return linear(v[0], v[1], Variable()); },
                         {random_input({4, 3}, 6), random_input({5, 3}, 7)});
}

TEST_CASE("gradcheck: binary elementwise ops", "[gradcheck][elementwise]") {
  auto inputs = [] { return std::vector<Variable>{random_input({3, 4}, 10), random_input({3, 4}, 11)}; };
  expect_gradients_match(
      "add", [](const std::vector<Variable>& v) { return add(v[0], v[1]); }, inputs());
  expect_gradients_match(
      "sub", [](const std::vector<Variable>& v) { return sub(v[0], v[1]); }, inputs());
  expect_gradients_match(
      "mul", [](const std::vector<Variable>& v) { return mul(v[0], v[1]); }, inputs());
  // One operand used twice: both contributions must be summed.
  expect_gradients_match("mul(x, x)", [](const std::vector<Variable>& v) { return mul(v[0], v[0]); },
                         {random_input({3, 4}, 12)});
}

TEST_CASE("gradcheck: unary elementwise ops", "[gradcheck][elementwise]") {
  auto input = [] { return std::vector<Variable>{random_input({3, 4}, 20)}; };
  expect_gradients_match(
      "neg", [](const std::vector<Variable>& v) { return neg(v[0]); }, input());
  expect_gradients_match(
      "scale", [](const std::vector<Variable>& v) { return scale(v[0], -2.5); }, input());
  expect_gradients_match(
      "add_scalar", [](const std::vector<Variable>& v) { return add_scalar(v[0], 3.0); }, input());
  expect_gradients_match(
      "square", [](const std::vector<Variable>& v) { return square(v[0]); }, input());
}

TEST_CASE("gradcheck: add_bias on 2-D and 4-D inputs", "[gradcheck][elementwise]") {
  Fn fn = [](const std::vector<Variable>& v) { return add_bias(v[0], v[1]); };
  expect_gradients_match("add_bias 2-D", fn, {random_input({3, 4}, 30), random_input({4}, 31)});
  expect_gradients_match("add_bias 4-D", fn, {random_input({2, 3, 2, 2}, 32), random_input({3}, 33)});
}

TEST_CASE("gradcheck: sum and mean over everything", "[gradcheck][reduce]") {
  expect_gradients_match("sum", [](const std::vector<Variable>& v) { return sum(v[0]); },
                         {random_input({3, 4}, 40)});
  expect_gradients_match("mean", [](const std::vector<Variable>& v) { return mean(v[0]); },
                         {random_input({3, 4}, 41)});
}

TEST_CASE("gradcheck: sum and mean over each axis, with and without keepdim", "[gradcheck][reduce]") {
  for (int64_t axis : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      std::string tag = " axis=" + std::to_string(axis) + " keepdim=" + std::to_string(keepdim);
      expect_gradients_match(
          "sum" + tag, [axis, keepdim](const std::vector<Variable>& v) { return sum(v[0], axis, keepdim); },
          {random_input({2, 3, 4}, 50)});
      expect_gradients_match(
          "mean" + tag, [axis, keepdim](const std::vector<Variable>& v) { return mean(v[0], axis, keepdim); },
          {random_input({2, 3, 4}, 51)});
    }
  }
}

TEST_CASE("gradcheck: activations", "[gradcheck][activation]") {
  expect_gradients_match("relu", [](const std::vector<Variable>& v) { return relu(v[0]); },
                         {away_from_zero(random_input({4, 5}, 60))});
  expect_gradients_match("leaky_relu 0.2",
                         [](const std::vector<Variable>& v) { return leaky_relu(v[0], 0.2); },
                         {away_from_zero(random_input({4, 5}, 61))});
  expect_gradients_match("leaky_relu 0.01",
                         [](const std::vector<Variable>& v) { return leaky_relu(v[0], 0.01); },
                         {away_from_zero(random_input({4, 5}, 62))});
  expect_gradients_match("tanh", [](const std::vector<Variable>& v) { return tanh(v[0]); },
                         {random_input({4, 5}, 63)});
  expect_gradients_match("sigmoid", [](const std::vector<Variable>& v) { return sigmoid(v[0]); },
                         {random_input({4, 5}, 64, 3.0)});
  expect_gradients_match("softplus", [](const std::vector<Variable>& v) { return softplus(v[0]); },
                         {random_input({4, 5}, 65, 3.0)});
}

TEST_CASE("gradcheck: bce_with_logits for logits, and for targets when they require grad",
          "[gradcheck][loss]") {
  // Targets that need no gradient: the usual case (labels).
  Variable labels(Tensor::from_values({2, 3}, {1, 0, 1, 0, 0.3, 0.9}, DType::f64), false);
  expect_gradients_match("bce_with_logits (logits)",
                         [labels](const std::vector<Variable>& v) { return bce_with_logits(v[0], labels); },
                         {random_input({2, 3}, 70, 3.0)});
  expect_gradients_match("bce_with_logits (logits and targets)",
                         [](const std::vector<Variable>& v) { return bce_with_logits(v[0], v[1]); },
                         {random_input({2, 3}, 71, 3.0), random_input({2, 3}, 72)});
}

TEST_CASE("gradcheck: reshape and flatten", "[gradcheck][shape]") {
  expect_gradients_match("reshape",
                         [](const std::vector<Variable>& v) {
                           return reshape(v[0], {4, 6});
                         },
                         {random_input({2, 3, 4}, 80)});
  // A following op makes the backward's reshape of the gradient matter.
  expect_gradients_match("reshape then mul",
                         [](const std::vector<Variable>& v) {
                           return mul(reshape(v[0], {6, 4}), v[1]);
                         },
                         {random_input({2, 3, 4}, 81), random_input({6, 4}, 82)});
  expect_gradients_match("flatten", [](const std::vector<Variable>& v) { return flatten(v[0]); },
                         {random_input({2, 3, 2, 2}, 83)});
}

TEST_CASE("reshape is a view of the data and flatten keeps the batch axis", "[shape]") {
  Variable x = random_input({2, 3, 4}, 84);
  Variable r = reshape(x, {4, 6});
  CHECK(r.shape() == Shape{4, 6});
  CHECK(r.data().shares_storage_with(x.data()));
  CHECK(flatten(x).shape() == Shape{2, 12});
  CHECK_THROWS_WITH(reshape(x, {5, 5}),
                    Catch::Contains("reshape") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[5, 5]"));
}

TEST_CASE("gradcheck: concat along axis 0 and 1", "[gradcheck][shape]") {
  expect_gradients_match("concat axis 0", [](const std::vector<Variable>& v) { return concat(v, 0); },
                         {random_input({2, 3}, 90), random_input({4, 3}, 91), random_input({1, 3}, 92)});
  expect_gradients_match("concat axis 1", [](const std::vector<Variable>& v) { return concat(v, 1); },
                         {random_input({2, 3}, 93), random_input({2, 1}, 94)});
  expect_gradients_match("concat axis -1 of 3-D",
                         [](const std::vector<Variable>& v) { return concat(v, -1); },
                         {random_input({2, 2, 3}, 95), random_input({2, 2, 2}, 96)});
  // A part that needs no gradient in the middle: the others still get theirs.
  Variable fixed(Tensor::ones({2, 2}, DType::f64), false);
  expect_gradients_match("concat with a constant part",
                         [fixed](const std::vector<Variable>& v) {
                           return concat({v[0], fixed, v[1]}, 1);
                         },
                         {random_input({2, 3}, 97), random_input({2, 1}, 98)});
}

TEST_CASE("gradcheck: slice along axis 0 and 1", "[gradcheck][shape]") {
  expect_gradients_match("slice axis 0", [](const std::vector<Variable>& v) { return slice(v[0], 0, 1, 2); },
                         {random_input({4, 5}, 100)});
  expect_gradients_match("slice axis 1", [](const std::vector<Variable>& v) { return slice(v[0], 1, 2, 3); },
                         {random_input({4, 5}, 101)});
  expect_gradients_match("slice axis 1 of 3-D",
                         [](const std::vector<Variable>& v) { return slice(v[0], 1, 1, 1); },
                         {random_input({2, 3, 2}, 102)});
}

TEST_CASE("gradcheck: a discriminator loss through several ops", "[gradcheck]") {
  // softplus(-D(x)) with D = linear -> leaky_relu -> linear, as in the GAN step.
  expect_gradients_match("D loss",
                         [](const std::vector<Variable>& v) {
                           Variable h = leaky_relu(linear(v[0], v[1], v[2]), 0.2);
                           return mean(softplus(neg(linear(h, v[3], v[4]))));
                         },
                         {random_input({4, 3}, 110), random_input({5, 3}, 111), random_input({5}, 112),
                          random_input({1, 5}, 113), random_input({1}, 114)});
}

TEST_CASE("mismatched operands: the error names the op and both shapes", "[errors]") {
  Variable a = random_input({2, 3}, 120);
  Variable b = random_input({4, 5}, 121);
  CHECK_THROWS_WITH(matmul(a, b),
                    Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  Variable c = random_input({3, 2}, 122);
  CHECK_THROWS_WITH(add(a, c),
                    Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[3, 2]"));
  Variable d = random_input({2, 4}, 123);
  CHECK_THROWS_WITH(concat({a, d}, 0),
                    Catch::Contains("concat") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_WITH(bce_with_logits(a, c), Catch::Contains("bce_with_logits") && Catch::Contains("[2, 3]") &&
                                               Catch::Contains("[3, 2]"));
}

namespace {

// Moves x so that no x + bias[c] (channel c on axis 1) lies within 0.1 of 0: a central
// difference never straddles relu's kink.
Variable away_from_kink(Variable x, const Variable& bias) {
  double* p = x.data().data<double>();
  const double* b = bias.data().data<double>();
  const int64_t c = x.size(1), inner = x.numel() / (x.size(0) * c);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double z = p[i] + b[(i / inner) % c];
    if (std::abs(z) < 0.1) p[i] += z < 0 ? -0.2 : 0.2;
  }
  return x;
}

}  // namespace

TEST_CASE("gradcheck: bias_activation for each activation on [N, F] and NCHW inputs", "[gradcheck][fused]") {
  using kernels::Activation;
  for (Activation act :
       {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh, Activation::sigmoid}) {
    for (const Shape& shape : {Shape{3, 4}, Shape{2, 3, 2, 2}}) {
      Variable bias = random_input({shape[1]}, 50);
      Variable x = away_from_kink(random_input(shape, 51), bias);
      expect_gradients_match(
          std::string("bias_activation ") + kernels::activation_name(act) + " " + shape_str(shape),
          [act](const std::vector<Variable>& v) { return bias_activation(v[0], v[1], act, 0.2); }, {x, bias});
    }
  }
}

TEST_CASE("gradcheck: bias_activation with StyleGAN's gain and clamp", "[gradcheck][fused]") {
  using kernels::Activation;
  for (Activation act :
       {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh, Activation::sigmoid}) {
    Variable bias = random_input({3}, 52);
    Variable x = away_from_kink(random_input({2, 3, 2, 2}, 53), bias);
    expect_gradients_match(
        std::string("bias_activation gain 1.4 clamp 0.8 ") + kernels::activation_name(act),
        [act](const std::vector<Variable>& v) { return bias_activation(v[0], v[1], act, 0.2, 1.4, 0.8); },
        {x, bias});
  }
}

namespace {

// Values with |x| >= 0.5: log and fractional powers stay away from 0.
Variable positive_input(const Shape& shape, uint64_t seed) {
  Variable v = random_input(shape, seed);
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] = std::abs(p[i]) + 0.5;
  return v;
}

// Moves every value at least 0.1 away from each bound, so no difference straddles a kink.
Variable away_from(Variable v, std::vector<double> kinks) {
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i)
    for (double k : kinks)
      if (std::abs(p[i] - k) < 0.1) p[i] = k + (p[i] < k ? -0.15 : 0.15);
  return v;
}

}  // namespace

TEST_CASE("gradcheck: exp, log, pow, abs and clamp", "[gradcheck][pointwise]") {
  expect_gradients_match("exp", [](const std::vector<Variable>& v) { return exp(v[0]); },
                         {random_input({3, 4}, 300)});
  expect_gradients_match("log", [](const std::vector<Variable>& v) { return log(v[0]); },
                         {positive_input({3, 4}, 301)});
  for (double p : {3.0, 2.5, -1.5, 1.0, 0.0}) {
    // Integer powers on any sign; fractional and negative ones on positive values.
    Variable x = p == std::floor(p) && p >= 0 ? random_input({3, 4}, 302) : positive_input({3, 4}, 303);
    expect_gradients_match("pow " + std::to_string(p),
                           [p](const std::vector<Variable>& v) { return pow(v[0], p); }, {x});
  }
  expect_gradients_match("abs", [](const std::vector<Variable>& v) { return abs(v[0]); },
                         {away_from_zero(random_input({3, 4}, 304))});
  expect_gradients_match("clamp", [](const std::vector<Variable>& v) { return clamp(v[0], -0.5, 0.3); },
                         {away_from(random_input({4, 5}, 305), {-0.5, 0.3})});
}

TEST_CASE("gradcheck: maximum, minimum and where, broadcasting", "[gradcheck][pointwise]") {
  // Operands apart by at least 0.1 everywhere: no ties, no straddled kink.
  auto apart = [](uint64_t seed) {
    Variable a = random_input({3, 4}, seed), b = random_input({4}, seed + 1);
    double* pa = a.data().data<double>();
    const double* pb = b.data().data<double>();
    for (int64_t i = 0; i < 12; ++i)
      if (std::abs(pa[i] - pb[i % 4]) < 0.1) pa[i] = pb[i % 4] + (pa[i] < pb[i % 4] ? -0.15 : 0.15);
    return std::vector<Variable>{a, b};
  };
  expect_gradients_match(
      "maximum", [](const std::vector<Variable>& v) { return maximum(v[0], v[1]); }, apart(306));
  expect_gradients_match(
      "minimum", [](const std::vector<Variable>& v) { return minimum(v[1], v[0]); }, apart(308));
  const Tensor condition = Tensor::from_values({3, 1}, {1, 0, 1}, DType::f64);
  expect_gradients_match("where",
                         [condition](const std::vector<Variable>& v) { return where(condition, v[0], v[1]); },
                         {random_input({3, 4}, 310), random_input({4}, 311)});
}

TEST_CASE("maximum and minimum split the gradient between equal operands", "[pointwise]") {
  Variable a = tensor({3}, {1.0, 2.0, 3.0}, true, DType::f64);
  Variable b = tensor({3}, {1.0, 5.0, 0.0}, true, DType::f64);
  sum(maximum(a, b)).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{0.5, 0.0, 1.0});
  CHECK(b.grad().to_vector() == std::vector<double>{0.5, 1.0, 0.0});
  Variable c = tensor({3}, {1.0, 2.0, 3.0}, true, DType::f64);
  Variable d = tensor({3}, {1.0, 5.0, 0.0}, true, DType::f64);
  sum(minimum(c, d)).backward();
  CHECK(c.grad().to_vector() == std::vector<double>{0.5, 1.0, 0.0});
  CHECK(d.grad().to_vector() == std::vector<double>{0.5, 0.0, 1.0});
}

TEST_CASE("a masked gradient is 0, not NaN, where the incoming gradient is infinite", "[pointwise]") {
  // clamp's gradient outside the bounds, where's unchosen side: selected away, not multiplied by 0.
  const double inf = std::numeric_limits<double>::infinity();
  Variable x = tensor({2}, {-5.0, 0.0}, true, DType::f64);
  Variable y = clamp(x, -1.0, 1.0);
  y.backward(Tensor::from_values({2}, {inf, 1.0}, DType::f64));
  CHECK(x.grad().to_vector() == std::vector<double>{0.0, 1.0});
  Variable a = tensor({2}, {1.0, 2.0}, true, DType::f64), b = tensor({2}, {3.0, 4.0}, true, DType::f64);
  where(Tensor::from_values({2}, {1.0, 0.0}, DType::f64), a, b)
      .backward(Tensor::from_values({2}, {inf, inf}, DType::f64));
  CHECK(a.grad().to_vector() == std::vector<double>{inf, 0.0});
  CHECK(b.grad().to_vector() == std::vector<double>{0.0, inf});
}
