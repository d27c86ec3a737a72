// Second-order gradients: grad() with create_graph against finite differences of the
// first-order gradient (float64), WGAN-GP penalties on a tiny MLP critic and a tiny conv
// critic, grad()'s seams (no .grad, no hooks, no observer) and its named errors, and
// backward with create_graph (.grad as usual plus a differentiable grad_history).
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad.h"
#include "autograd/gradcheck.h"
#include "autograd/nn_norm.h"
#include "autograd/nn_spectral_norm.h"
#include "autograd/nn_stylegan.h"
#include "autograd/nn_stylegan_nets.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "runtime/rng.h"

using namespace tandem;

namespace {

using Fn = std::function<Variable(const std::vector<Variable>&)>;

constexpr double kTolerance = 1e-6;
constexpr double kEps = 1e-6;

Tensor random_weights(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  fill_uniform(t, 0.5, 1.5, gen);
  return t;
}

// The probe S(inputs) = sum_k <v_k, dL/dinput_k> with L = <w, fn(inputs)>: a scalar made
// from the first-order gradients. With create_graph they come from the second-order rules
// (and S has history); without, from the plain first-order backward, which the finite
// differences use as the reference (it is itself checked by test_gradcheck_ops.cpp).
struct Probe {
  Fn fn;
  Tensor w;
  std::vector<Tensor> v;

  Variable operator()(const std::vector<Variable>& inputs, bool create_graph) const {
    Variable loss = sum(mul(fn(inputs), Variable(w)));
    std::vector<Variable> g = grad({loss}, inputs, {}, {.create_graph = create_graph, .allow_unused = true});
    Variable s;
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!g[k].defined()) continue;
      Variable term = sum(mul(g[k], Variable(v[k])));
      s = s.defined() ? add(s, term) : term;
    }
    return s;
  }
};

// Worst relative error over all inputs between the double backward grad(S, inputs) and
// central differences of the plain first-order S; also checks that the first-order values
// built with create_graph equal the plain ones.
double second_order_error(const std::string& what, const Fn& fn, const std::vector<Variable>& inputs) {
  Probe probe{fn, random_weights(fn(inputs).shape(), 7), {}};
  for (size_t k = 0; k < inputs.size(); ++k) probe.v.push_back(random_weights(inputs[k].shape(), 100 + k));
  Variable s = probe(inputs, true);
  REQUIRE(s.defined());
  CHECK(s.item() == Approx(probe(inputs, false).item()).epsilon(1e-12));
  std::vector<Variable> analytic(inputs.size());
  if (s.requires_grad()) analytic = grad({s}, inputs, {}, {.allow_unused = true});
  double worst = 0.0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    double* x = const_cast<Variable&>(inputs[k]).data().data<double>();
    std::vector<double> numeric(static_cast<size_t>(inputs[k].numel()));
    double scale = 1.0;
    for (int64_t i = 0; i < inputs[k].numel(); ++i) {
      double saved = x[i];
      x[i] = saved + kEps;
      double plus = probe(inputs, false).item();
      x[i] = saved - kEps;
      double minus = probe(inputs, false).item();
      x[i] = saved;
      numeric[size_t(i)] = (plus - minus) / (2 * kEps);
      scale = std::max(scale, std::abs(numeric[size_t(i)]));
    }
    std::vector<double> a =
        analytic[k].defined() ? analytic[k].data().to_vector() : std::vector<double>(numeric.size(), 0.0);
    double err = 0.0;
    for (size_t i = 0; i < numeric.size(); ++i) err = std::max(err, std::abs(a[i] - numeric[i]));
    worst = std::max(worst, err / scale);
  }
  INFO(what << ": worst relative error " << worst);
  return worst;
}

// Checks the op alone and squared: squaring makes the op's incoming gradient carry history,
// so its second-order rule must pass that history on correctly.
void expect_second_order_matches(const std::string& what, const Fn& fn, const std::vector<Variable>& inputs) {
  {
    INFO(what);
    CHECK(second_order_error(what, fn, inputs) < kTolerance);
  }
  Fn squared = [fn](const std::vector<Variable>& v) { return square(fn(v)); };
  INFO("square(" << what << ")");
  CHECK(second_order_error("square(" + what + ")", squared, inputs) < kTolerance);
}

// The probe S of fn built with create_graph (a scalar with history): checking its second
// order checks fn's third, i.e. the second-order rules of the ops that fn's rules produce.
Fn first_order_probe(const Fn& fn) {
  return [fn](const std::vector<Variable>& inputs) {
    Probe probe{fn, random_weights(fn(inputs).shape(), 8), {}};
    for (size_t k = 0; k < inputs.size(); ++k) probe.v.push_back(random_weights(inputs[k].shape(), 200 + k));
    return probe(inputs, true);
  };
}

// Moves values with |x| < 0.05 to ±(|x| + 0.1): a difference never straddles a kink at 0.
Variable away_from_zero(Variable v) {
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) {
    if (std::abs(p[i]) < 0.05) p[i] = p[i] < 0 ? p[i] - 0.1 : p[i] + 0.1;
  }
  return v;
}

Variable positive(Variable v) {
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] = std::abs(p[i]) + 0.5;
  return v;
}

struct CountingObserver : BackwardObserver {
  int begins = 0, ends = 0;
  size_t leaves = 0;  // reachable leaves of the last backward
  void on_backward_begin(const BackwardPass& pass) override {
    ++begins;
    leaves = pass.reachable_leaves().size();
  }
  void on_backward_end(const BackwardPass&) override { ++ends; }
};

}  // namespace

TEST_CASE("second order: binary elementwise ops", "[second_order][elementwise]") {
  auto inputs = [] { return std::vector<Variable>{random_input({3, 4}, 10), random_input({3, 4}, 11)}; };
  expect_second_order_matches(
      "add", [](const std::vector<Variable>& v) { return add(v[0], v[1]); }, inputs());
  expect_second_order_matches(
      "sub", [](const std::vector<Variable>& v) { return sub(v[0], v[1]); }, inputs());
  expect_second_order_matches(
      "mul", [](const std::vector<Variable>& v) { return mul(v[0], v[1]); }, inputs());
  expect_second_order_matches("mul(x, x)", [](const std::vector<Variable>& v) { return mul(v[0], v[0]); },
                              {random_input({3, 4}, 12)});
}

TEST_CASE("second order: broadcasting add, sub, mul and div; sum_to, broadcast_to, index_select",
          "[second_order][broadcast]") {
  auto row_and_matrix = [] { return std::vector<Variable>{random_input({3, 4}, 40), random_input({4}, 41)}; };
  expect_second_order_matches(
      "add [3, 4] + [4]", [](const std::vector<Variable>& v) { return add(v[0], v[1]); }, row_and_matrix());
  expect_second_order_matches(
      "sub [4] - [3, 4]", [](const std::vector<Variable>& v) { return sub(v[1], v[0]); }, row_and_matrix());
  expect_second_order_matches("mul [3, 1] * [1, 4]",
                              [](const std::vector<Variable>& v) { return mul(v[0], v[1]); },
                              {random_input({3, 1}, 42), random_input({1, 4}, 43)});
  expect_second_order_matches("div [3, 4] / [3, 1]",
                              [](const std::vector<Variable>& v) { return div(v[0], v[1]); },
                              {random_input({3, 4}, 44), positive(random_input({3, 1}, 45))});
  expect_second_order_matches("sum_to",
                              [](const std::vector<Variable>& v) {
                                return sum_to(v[0], {3, 1});
                              },
                              {random_input({2, 3, 4}, 46)});
  expect_second_order_matches("broadcast_to",
                              [](const std::vector<Variable>& v) {
                                return broadcast_to(v[0], {2, 3});
                              },
                              {random_input({3}, 47)});
  Tensor index = Tensor::from_values({4}, {2, 0, 2, 1}, DType::i64);
  expect_second_order_matches(
      "index_select", [index](const std::vector<Variable>& v) { return index_select(v[0], 0, index); },
      {random_input({3, 2}, 48)});
}

TEST_CASE("second order: unary elementwise ops and sqrt", "[second_order][elementwise]") {
  auto input = [] { return std::vector<Variable>{random_input({3, 4}, 20)}; };
  expect_second_order_matches(
      "neg", [](const std::vector<Variable>& v) { return neg(v[0]); }, input());
  expect_second_order_matches(
      "scale", [](const std::vector<Variable>& v) { return scale(v[0], -2.5); }, input());
  expect_second_order_matches(
      "add_scalar", [](const std::vector<Variable>& v) { return add_scalar(v[0], 3.0); }, input());
  expect_second_order_matches(
      "square", [](const std::vector<Variable>& v) { return square(v[0]); }, input());
  expect_second_order_matches("sqrt", [](const std::vector<Variable>& v) { return sqrt(v[0]); },
                              {positive(random_input({3, 4}, 21))});
  Fn bias = [](const std::vector<Variable>& v) { return add_bias(v[0], v[1]); };
  expect_second_order_matches("add_bias 2-D", bias, {random_input({3, 4}, 22), random_input({4}, 23)});
  expect_second_order_matches("add_bias 4-D", bias, {random_input({2, 3, 2, 2}, 24), random_input({3}, 25)});
}

TEST_CASE("second order: bias_activation for each activation", "[second_order][fused]") {
  using kernels::Activation;
  for (Activation act :
       {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh, Activation::sigmoid}) {
    Fn fn = [act](const std::vector<Variable>& v) { return bias_activation(v[0], v[1], act, 0.2); };
    // A zero bias keeps the inputs' distance from relu's kink.
    Variable bias = act == Activation::relu || act == Activation::leaky_relu
                        ? Variable(Tensor::zeros({3}, DType::f64), true)
                        : random_input({3}, 27);
    expect_second_order_matches(std::string("bias_activation ") + kernels::activation_name(act), fn,
                                {away_from_zero(random_input({2, 3, 2, 2}, 26)), bias});
  }
}

TEST_CASE("second order: bias_activation with StyleGAN's gain and clamp", "[second_order][fused]") {
  using kernels::Activation;
  for (Activation act :
       {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh, Activation::sigmoid}) {
    Fn fn = [act](const std::vector<Variable>& v) { return bias_activation(v[0], v[1], act, 0.2, 1.4, 0.8); };
    Variable bias = act == Activation::relu || act == Activation::leaky_relu
                        ? Variable(Tensor::zeros({3}, DType::f64), true)
                        : random_input({3}, 29);
    expect_second_order_matches(std::string("bias_activation gain clamp ") + kernels::activation_name(act),
                                fn, {away_from_zero(random_input({2, 3, 2, 2}, 28)), bias});
  }
}

TEST_CASE("sqrt: value, and derivatives to third order, 0 (not inf) at 0", "[second_order][elementwise]") {
  Variable x = tensor({3}, {0.0, 4.0, 0.25}, true, DType::f64);
  Variable y = sqrt(x);
  CHECK(y.data().to_vector() == std::vector<double>{0.0, 2.0, 0.5});
  std::vector<Variable> g = grad({sum(y)}, {x}, {}, {.create_graph = true});
  CHECK(g[0].data().to_vector() == std::vector<double>{0.0, 0.25, 1.0});
  std::vector<Variable> h = grad({sum(g[0])}, {x}, {}, {.create_graph = true});  // -1 / (4 x^1.5)
  std::vector<double> hv = h[0].data().to_vector();
  CHECK(hv[0] == 0.0);
  CHECK(hv[1] == Approx(-1.0 / 32.0));
  CHECK(hv[2] == Approx(-2.0));
  std::vector<double> third = grad({sum(h[0])}, {x})[0].data().to_vector();  // 3 / (8 x^2.5)
  CHECK(third[0] == 0.0);
  CHECK(third[1] == Approx(3.0 / 256.0));
  CHECK(third[2] == Approx(12.0));
  // A norm at the zero vector: subgradient 0, no NaN.
  Variable v = tensor({2}, {0.0, 0.0}, true, DType::f64);
  std::vector<Variable> gv = grad({sqrt(sum(square(v)))}, {v});
  CHECK(gv[0].data().to_vector() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("second order: sum and mean, all and per axis", "[second_order][reduce]") {
  expect_second_order_matches("sum", [](const std::vector<Variable>& v) { return sum(v[0]); },
                              {random_input({3, 4}, 40)});
  expect_second_order_matches("mean", [](const std::vector<Variable>& v) { return mean(v[0]); },
                              {random_input({3, 4}, 41)});
  for (int64_t axis : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      std::string tag = " axis=" + std::to_string(axis) + " keepdim=" + std::to_string(keepdim);
      expect_second_order_matches(
          "sum" + tag, [axis, keepdim](const std::vector<Variable>& v) { return sum(v[0], axis, keepdim); },
          {random_input({2, 3, 4}, 50)});
      expect_second_order_matches(
          "mean" + tag, [axis, keepdim](const std::vector<Variable>& v) { return mean(v[0], axis, keepdim); },
          {random_input({2, 3, 4}, 51)});
    }
  }
}

TEST_CASE("second order: reshape and flatten", "[second_order][shape]") {
  expect_second_order_matches("reshape then mul",
                              [](const std::vector<Variable>& v) {
                                return mul(reshape(v[0], {6, 4}), v[1]);
                              },
                              {random_input({2, 3, 4}, 80), random_input({6, 4}, 81)});
  expect_second_order_matches("flatten", [](const std::vector<Variable>& v) { return flatten(v[0]); },
                              {random_input({2, 3, 2, 2}, 82)});
}

TEST_CASE("second order: matmul in all four transpose combinations, and linear", "[second_order][linalg]") {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
      Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      expect_second_order_matches(
          "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
          [ta, tb](const std::vector<Variable>& v) { return matmul(v[0], v[1], ta, tb); },
          {random_input(sa, 1), random_input(sb, 2)});
    }
  }
  expect_second_order_matches("linear with bias",
                              [](const std::vector<Variable>& v) { return linear(v[0], v[1], v[2]); },
                              {random_input({4, 3}, 3), random_input({5, 3}, 4), random_input({5}, 5)});
  expect_second_order_matches("linear without bias",
                              [](const std::vector<Variable>& v) { return linear(v[0], v[1], Variable()); },
                              {random_input({4, 3}, 6), random_input({5, 3}, 7)});
}

TEST_CASE("second order: activations, relu and leaky_relu on both sides of the switch",
          "[second_order][activation]") {
  // Inputs of both signs (a margin of 0.05 from the kink for the finite difference); the
  // product with y makes the slope's switch matter for the mixed second derivative.
  auto both_sides = [] {
    return std::vector<Variable>{away_from_zero(random_input({4, 5}, 60)), random_input({4, 5}, 61)};
  };
  expect_second_order_matches(
      "relu(x) * y", [](const std::vector<Variable>& v) { return mul(relu(v[0]), v[1]); }, both_sides());
  expect_second_order_matches(
      "leaky_relu 0.2 (x) * y",
      [](const std::vector<Variable>& v) { return mul(leaky_relu(v[0], 0.2), v[1]); }, both_sides());
  expect_second_order_matches("leaky_relu 0.01",
                              [](const std::vector<Variable>& v) { return leaky_relu(v[0], 0.01); },
                              {away_from_zero(random_input({4, 5}, 62))});
  expect_second_order_matches("tanh", [](const std::vector<Variable>& v) { return tanh(v[0]); },
                              {random_input({4, 5}, 63)});
  expect_second_order_matches("sigmoid", [](const std::vector<Variable>& v) { return sigmoid(v[0]); },
                              {random_input({4, 5}, 64, 3.0)});
  expect_second_order_matches("softplus", [](const std::vector<Variable>& v) { return softplus(v[0]); },
                              {random_input({4, 5}, 65, 3.0)});
}

TEST_CASE("second order: concat and slice", "[second_order][shape]") {
  Fn cat1 = [](const std::vector<Variable>& v) { return concat({v[0], v[1], v[2]}, 1); };
  expect_second_order_matches(
      "concat axis=1", cat1,
      {random_input({2, 1, 3}, 90), random_input({2, 2, 3}, 91), random_input({2, 3, 3}, 92)});
  Fn cat_last = [](const std::vector<Variable>& v) { return mul(concat({v[0], v[1]}, -1), v[2]); };
  expect_second_order_matches("concat axis=-1 then mul", cat_last,
                              {random_input({3, 2}, 93), random_input({3, 1}, 94), random_input({3, 3}, 95)});
  for (int64_t axis : {0, 1, -1}) {
    expect_second_order_matches("slice axis=" + std::to_string(axis),
                                [axis](const std::vector<Variable>& v) { return slice(v[0], axis, 1, 2); },
                                {random_input({3, 4, 5}, 96)});
  }
  // A slice of a product: the slice's incoming gradient and its input both carry history.
  expect_second_order_matches("slice(x * y)",
                              [](const std::vector<Variable>& v) { return slice(mul(v[0], v[1]), 1, 2, 2); },
                              {random_input({2, 5}, 97), random_input({2, 5}, 98)});
}

TEST_CASE("second order: permute and transpose", "[second_order][shape][permute]") {
  // Of a product, so the permute's incoming gradient and its input both carry history.
  Fn perm = [](const std::vector<Variable>& v) { return permute(mul(v[0], v[1]), {2, 0, 1}); };
  expect_second_order_matches("permute(x * y)", perm,
                              {random_input({2, 3, 4}, 99), random_input({2, 3, 4}, 100)});
  Fn trans = [](const std::vector<Variable>& v) { return mul(transpose(v[0], 0, -1), v[1]); };
  expect_second_order_matches("transpose(x) * y", trans,
                              {random_input({3, 2, 4}, 101), random_input({4, 2, 3}, 102)});
  // The third order: the second-order rule's own ops differentiate exactly.
  expect_second_order_matches("probe of permute(x * y)", first_order_probe(perm),
                              {random_input({2, 3, 4}, 103), random_input({2, 3, 4}, 104)});
}

TEST_CASE("second order: a spectrally normalised layer (an R1 penalty's path)",
          "[second_order][spectral_norm]") {
  // x through linear / conv2d with W / sigma(W), u and v constants, as a training forward
  // uses them: R1 differentiates the input gradient again, with respect to x and W.
  const Tensor u = random_weights({3}, 120), v = random_weights({4}, 121), v18 = random_weights({18}, 122);
  Fn sn_linear = [u, v](const std::vector<Variable>& p) {
    return tanh(linear(p[0], div(p[1], nn::spectral_sigma(p[1], u, v)), Variable()));
  };
  expect_second_order_matches("tanh(linear(x, W / sigma))", sn_linear,
                              {random_input({2, 4}, 123), random_input({3, 4}, 124)});
  Fn sn_conv = [u, v18](const std::vector<Variable>& p) {
    const Variable sigma = nn::spectral_sigma(nn::spectral_weight_matrix(p[1], 0), u, v18);
    return tanh(conv2d(p[0], div(p[1], reshape(sigma, {1, 1, 1, 1})), Variable(), {1, 1, 0}));
  };
  expect_second_order_matches("tanh(conv2d(x, W / sigma))", sn_conv,
                              {random_input({1, 2, 3, 3}, 125), random_input({3, 2, 3, 3}, 126)});
}

TEST_CASE("second order: StyleGAN2's residual block (an R1 penalty's path)", "[second_order][stylegan]") {
  auto block = std::make_shared<nn::ResidualBlock>(2, 3);
  Fn fn = [block](const std::vector<Variable>& v) {
    block->conv1->weight = v[1];
    block->conv1->bias = Variable(Tensor::zeros({3}, DType::f64));
    block->conv2->weight = v[2];
    block->conv2->bias = Variable(Tensor::zeros({3}, DType::f64));
    block->skip->weight = v[3];
    return block->forward(v[0]);
  };
  expect_second_order_matches("ResidualBlock 2 -> 3", fn,
                              {random_input({1, 2, 3, 3}, 130), random_input({3, 2, 3, 3}, 131),
                               random_input({3, 3, 3, 3}, 132), random_input({3, 2, 1, 1}, 133)});
}

TEST_CASE("second order: avg_pool2x and upsample_nearest2x", "[second_order][pool]") {
  expect_second_order_matches("avg_pool2x", [](const std::vector<Variable>& v) { return avg_pool2x(v[0]); },
                              {random_input({2, 2, 4, 6}, 110)});
  expect_second_order_matches("upsample_nearest2x",
                              [](const std::vector<Variable>& v) { return upsample_nearest2x(v[0]); },
                              {random_input({2, 2, 2, 3}, 111)});
  expect_second_order_matches("avg_pool2x(x * y)",
                              [](const std::vector<Variable>& v) { return avg_pool2x(mul(v[0], v[1])); },
                              {random_input({1, 2, 4, 4}, 112), random_input({1, 2, 4, 4}, 113)});
}

TEST_CASE("second and third order: upfirdn2d and StyleGAN2's resampling helpers",
          "[second_order][upfirdn2d]") {
  const Tensor blur = setup_filter({1, 3, 3, 1}, DType::f64);
  const Tensor odd = Tensor::from_values({2, 3}, {0.1, -0.3, 0.7, 0.2, 1.1, -0.5}, DType::f64);
  const kernels::UpFirDn2dParams p{
      .up_x = 2, .up_y = 3, .down_x = 3, .down_y = 2, .pad_x0 = 1, .pad_x1 = -1, .pad_y0 = -2, .pad_y1 = 2};
  expect_second_order_matches("upfirdn2d",
                              [&](const std::vector<Variable>& v) { return upfirdn2d(v[0], odd, p); },
                              {random_input({1, 2, 4, 5}, 114)});
  expect_second_order_matches(
      "upsample2d(x * y)", [&](const std::vector<Variable>& v) { return upsample2d(mul(v[0], v[1]), blur); },
      {random_input({1, 2, 3, 3}, 115), random_input({1, 2, 3, 3}, 116)});
  // A blurred critic's shape: R1 differentiates through downsample2d after an activation.
  expect_second_order_matches(
      "downsample2d(softplus(x))",
      [&](const std::vector<Variable>& v) { return downsample2d(softplus(v[0]), blur); },
      {random_input({1, 2, 4, 6}, 117)});
  Fn squared = [&](const std::vector<Variable>& v) { return square(filter2d(v[0], blur)); };
  expect_second_order_matches("d(filter2d)", first_order_probe(squared), {random_input({1, 1, 4, 4}, 118)});
}

TEST_CASE("second and third order: interpolate_bilinear up, down and at odd scales",
          "[second_order][bilinear]") {
  expect_second_order_matches("interpolate_bilinear up",
                              [](const std::vector<Variable>& v) { return interpolate_bilinear(v[0], 5, 7); },
                              {random_input({1, 2, 3, 4}, 130)});
  expect_second_order_matches(
      "interpolate_bilinear(x * y) down",
      [](const std::vector<Variable>& v) { return interpolate_bilinear(mul(v[0], v[1]), 3, 2); },
      {random_input({1, 2, 7, 5}, 131), random_input({1, 2, 7, 5}, 132)});
  Fn squared = [](const std::vector<Variable>& v) { return square(interpolate_bilinear(v[0], 4, 5)); };
  expect_second_order_matches("d(interpolate_bilinear)", first_order_probe(squared),
                              {random_input({1, 1, 3, 7}, 133)});
}

TEST_CASE("second order: bce_with_logits for logits and targets", "[second_order][loss]") {
  expect_second_order_matches("bce_with_logits",
                              [](const std::vector<Variable>& v) { return bce_with_logits(v[0], v[1]); },
                              {random_input({3, 4}, 120, 2.0), random_input({3, 4}, 121, 0.5)});
  Variable targets(Tensor::full({3, 4}, 1.0, DType::f64), false);
  expect_second_order_matches(
      "bce_with_logits, fixed targets",
      [targets](const std::vector<Variable>& v) { return bce_with_logits(v[0], targets); },
      {random_input({3, 4}, 122, 2.0)});
}

TEST_CASE("third order through the ops that concat, slice, pooling and bce_with_logits's rules produce",
          "[second_order][shape][pool][loss]") {
  // Squared first, so each op's incoming gradient carries history and its rule records.
  auto third = [](const std::string& what, const Fn& fn, const std::vector<Variable>& inputs) {
    Fn squared = [fn](const std::vector<Variable>& v) { return square(fn(v)); };
    expect_second_order_matches("d(" + what + ")", first_order_probe(squared), inputs);
  };
  third("slice", [](const std::vector<Variable>& v) { return slice(v[0], 1, 1, 2); },
        {random_input({2, 4}, 160)});
  third("concat",
        [](const std::vector<Variable>& v) {
          return concat({v[0], v[1]}, 0);
        },
        {random_input({1, 3}, 161), random_input({2, 3}, 162)});
  third("avg_pool2x", [](const std::vector<Variable>& v) { return avg_pool2x(v[0]); },
        {random_input({1, 2, 4, 4}, 163)});
  third("upsample_nearest2x", [](const std::vector<Variable>& v) { return upsample_nearest2x(v[0]); },
        {random_input({1, 2, 2, 2}, 164)});
  third("bce_with_logits", [](const std::vector<Variable>& v) { return bce_with_logits(v[0], v[1]); },
        {random_input({2, 3}, 165), random_input({2, 3}, 166, 0.5)});
}

TEST_CASE("second order: conv2d with bias, the models' strides and paddings", "[second_order][conv]") {
  struct Case {
    const char* what;
    Shape x, w;
    kernels::Conv2dParams p;
  };
  // DCGAN's critic (k4 s2 p1), PGGAN's blocks (k3 s1 p1) and to/from-rgb (k1 s1 p0), and a
  // stride that leaves a row and column of the input unused (k3 s2 p0 on 6x6).
  for (const Case& c : {Case{"k4 s2 p1", {2, 2, 6, 6}, {3, 2, 4, 4}, {.stride = 2, .padding = 1}},
                        Case{"k3 s1 p1", {2, 2, 4, 4}, {3, 2, 3, 3}, {.stride = 1, .padding = 1}},
                        Case{"k1 s1 p0", {2, 3, 3, 3}, {2, 3, 1, 1}, {.stride = 1, .padding = 0}},
                        Case{"k3 s2 p0 on 6x6", {1, 2, 6, 6}, {2, 2, 3, 3}, {.stride = 2, .padding = 0}}}) {
    kernels::Conv2dParams p = c.p;
    expect_second_order_matches(
        std::string("conv2d ") + c.what,
        [p](const std::vector<Variable>& v) { return conv2d(v[0], v[1], v[2], p); },
        {random_input(c.x, 130), random_input(c.w, 131), random_input({c.w[0]}, 132)});
  }
}

TEST_CASE("second order: conv_transpose2d with bias, the models' strides and paddings",
          "[second_order][conv]") {
  struct Case {
    const char* what;
    Shape x, w;
    kernels::Conv2dParams p;
  };
  // DCGAN's generator (k4 s2 p1), a stride-1 case and one with output padding.
  for (const Case& c : {Case{"k4 s2 p1", {2, 3, 3, 3}, {3, 2, 4, 4}, {.stride = 2, .padding = 1}},
                        Case{"k3 s1 p1", {2, 2, 3, 3}, {2, 3, 3, 3}, {.stride = 1, .padding = 1}},
                        Case{"k3 s2 p1 output_padding 1",
                             {1, 2, 3, 3},
                             {2, 2, 3, 3},
                             {.stride = 2, .padding = 1, .output_padding = 1}}}) {
    kernels::Conv2dParams p = c.p;
    expect_second_order_matches(
        std::string("conv_transpose2d ") + c.what,
        [p](const std::vector<Variable>& v) { return conv_transpose2d(v[0], v[1], v[2], p); },
        {random_input(c.x, 140), random_input(c.w, 141), random_input({c.w[1]}, 142)});
  }
}

TEST_CASE("second order: grouped and dilated conv2d and conv_transpose2d", "[second_order][conv][grouped]") {
  struct Case {
    const char* what;
    Shape x, w;
    kernels::Conv2dParams p;
  };
  for (const Case& c : {Case{"conv2d groups 2", {2, 4, 4, 4}, {4, 2, 3, 3}, {.padding = 1, .groups = 2}},
                        Case{"conv2d depthwise dilation 2 stride 2",
                             {2, 3, 6, 5},
                             {3, 1, 3, 3},
                             {.stride = 2, .padding = 1, .dilation = 2, .groups = 3}}}) {
    kernels::Conv2dParams p = c.p;
    expect_second_order_matches(
        c.what, [p](const std::vector<Variable>& v) { return conv2d(v[0], v[1], v[2], p); },
        {random_input(c.x, 135), random_input(c.w, 136), random_input({c.w[0]}, 137)});
  }
  for (const Case& c :
       {Case{"conv_transpose2d groups 2 output_padding 1",
             {1, 4, 3, 3},
             {4, 1, 3, 3},
             {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2}},
        Case{"conv_transpose2d dilation 2", {2, 2, 3, 3}, {2, 2, 2, 2}, {.padding = 1, .dilation = 2}}}) {
    kernels::Conv2dParams p = c.p;
    expect_second_order_matches(
        c.what, [p](const std::vector<Variable>& v) { return conv_transpose2d(v[0], v[1], v[2], p); },
        {random_input(c.x, 145), random_input(c.w, 146), random_input({c.w[1] * p.groups}, 147)});
  }
}

TEST_CASE("second order: modulated_conv2d, demodulated or not, in both forms",
          "[second_order][stylegan][modulated]") {
  for (bool demodulate : {true, false})
    for (nn::ModulatedForm form : {nn::ModulatedForm::grouped, nn::ModulatedForm::scaled}) {
      expect_second_order_matches(
          std::string(demodulate ? "modulated_conv2d demodulated" : "modulated_conv2d") +
              (form == nn::ModulatedForm::scaled ? ", scaled" : ", grouped"),
          [demodulate, form](const std::vector<Variable>& v) {
            return nn::modulated_conv2d(v[0], v[1], v[2], demodulate, {.padding = 1}, form);
          },
          {random_input({2, 3, 4, 4}, 170), random_input({2, 3, 3, 3}, 171), random_input({2, 3}, 172)});
    }
}

TEST_CASE("second order of conv2d's gradient ops (third order of conv2d)", "[second_order][conv]") {
  // The rules of conv2d and conv_transpose2d produce these two ops; their own rules make
  // the third and higher orders.
  for (int64_t stride : {1, 2}) {
    kernels::Conv2dParams p{.stride = stride, .padding = 1};
    Shape x = {2, 2, 5, 5}, w = {3, 2, 3, 3};
    Shape y = {2, 3, stride == 1 ? 5 : 3, stride == 1 ? 5 : 3};
    std::string tag = " stride " + std::to_string(stride);
    expect_second_order_matches(
        "conv2d_input_grad" + tag,
        [p, x](const std::vector<Variable>& v) { return conv2d_input_grad(v[0], v[1], x, p); },
        {random_input(y, 150), random_input(w, 151)});
    expect_second_order_matches(
        "conv2d_weight_grad" + tag,
        [p, w](const std::vector<Variable>& v) { return conv2d_weight_grad(v[0], v[1], w, p); },
        {random_input(y, 152), random_input(x, 153)});
  }
}

TEST_CASE("grad without create_graph equals backward's .grad and has no history", "[second_order][grad]") {
  Variable x = random_input({4, 3}, 200), w = random_input({2, 3}, 201);
  Variable loss = mean(tanh(linear(x, w, Variable())));
  std::vector<Variable> g = grad({loss}, {x, w}, {}, {.retain_graph = true});
  CHECK_FALSE(g[0].requires_grad());
  loss.backward();
  CHECK(g[0].data().to_vector() == x.grad().to_vector());
  CHECK(g[1].data().to_vector() == w.grad().to_vector());
}

namespace {

// A tiny critic D(x) = linear(leaky_relu(linear(x))) and the WGAN-GP penalty
// mean_n (||grad_x D(x)_n|| - 1)^2 computed with grad(create_graph).
Variable critic(const Variable& x, const std::vector<Variable>& p) {
  return linear(tanh(leaky_relu(linear(x, p[0], p[1]), 0.2)), p[2], p[3]);
}

Variable gradient_penalty(const Variable& x, const std::vector<Variable>& p) {
  Variable d = critic(x, p);
  Variable gx = grad({sum(d)}, {x}, {}, {.create_graph = true})[0];
  Variable norm = sqrt(sum(square(gx), 1));
  return mean(square(add_scalar(norm, -1.0)));
}

}  // namespace

TEST_CASE("a WGAN-GP penalty on a tiny critic backpropagates into the parameters correctly",
          "[second_order][wgan_gp]") {
  Variable x = away_from_zero(random_input({4, 3}, 300));
  std::vector<Variable> p = {random_input({5, 3}, 301), random_input({5}, 302), random_input({1, 5}, 303),
                             random_input({1}, 304)};
  Variable penalty = gradient_penalty(x, p);
  penalty.backward();
  for (size_t k = 0; k < p.size(); ++k) {
    double* d = p[k].data().data<double>();
    std::vector<double> analytic =
        p[k].grad().defined() ? p[k].grad().to_vector() : std::vector<double>(p[k].numel());
    double worst = 0.0, scale = 1.0;
    for (int64_t i = 0; i < p[k].numel(); ++i) {
      double saved = d[i];
      d[i] = saved + kEps;
      double plus = gradient_penalty(x, p).item();
      d[i] = saved - kEps;
      double minus = gradient_penalty(x, p).item();
      d[i] = saved;
      double numeric = (plus - minus) / (2 * kEps);
      scale = std::max(scale, std::abs(numeric));
      worst = std::max(worst, std::abs(numeric - analytic[size_t(i)]));
    }
    INFO("parameter " << k << " " << shape_str(p[k].shape()));
    CHECK(worst / scale < kTolerance);
  }
  // The output bias does not change grad_x D: the penalty does not reach it.
  CHECK_FALSE(p[3].grad().defined());
}

namespace {

// A tiny conv critic in the models' style: conv k4 s2 p1, conv k3 s1 p1, avg_pool2x,
// linear (leaky_relu 0.2 between), and its WGAN-GP penalty on x [N, 1, 8, 8]. Without
// create_graph, grad_x D comes from the plain first-order backward: the finite differences
// use that, so they check the values of the second-order rules as well as their backward.
Variable conv_critic(const Variable& x, const std::vector<Variable>& p) {
  Variable h = leaky_relu(conv2d(x, p[0], p[1], {.stride = 2, .padding = 1}), 0.2);
  h = avg_pool2x(leaky_relu(conv2d(h, p[2], p[3], {.stride = 1, .padding = 1}), 0.2));
  return linear(flatten(h), p[4], p[5]);
}

Variable conv_gradient_penalty(const Variable& x, const std::vector<Variable>& p, bool create_graph) {
  Variable d = conv_critic(x, p);
  Variable gx = grad({sum(d)}, {x}, {}, {.create_graph = create_graph})[0];
  Variable norm = sqrt(sum(square(flatten(gx)), 1));
  return mean(square(add_scalar(norm, -1.0)));
}

}  // namespace

TEST_CASE("a WGAN-GP penalty on a tiny conv critic backpropagates into the parameters correctly",
          "[second_order][wgan_gp][conv]") {
  Variable x = random_input({2, 1, 8, 8}, 310);
  std::vector<Variable> p = {random_input({3, 1, 4, 4}, 311, 0.5), random_input({3}, 312),
                             random_input({4, 3, 3, 3}, 313, 0.5), random_input({4}, 314),
                             random_input({1, 16}, 315, 0.5),      random_input({1}, 316)};
  Variable penalty = conv_gradient_penalty(x, p, true);
  CHECK(penalty.item() == Approx(conv_gradient_penalty(x, p, false).item()).epsilon(1e-12));
  penalty.backward();
  for (size_t k = 0; k < p.size(); ++k) {
    double* d = p[k].data().data<double>();
    std::vector<double> analytic =
        p[k].grad().defined() ? p[k].grad().to_vector() : std::vector<double>(p[k].numel());
    double worst = 0.0, scale = 1.0;
    for (int64_t i = 0; i < p[k].numel(); ++i) {
      double saved = d[i];
      d[i] = saved + kEps;
      double plus = conv_gradient_penalty(x, p, false).item();
      d[i] = saved - kEps;
      double minus = conv_gradient_penalty(x, p, false).item();
      d[i] = saved;
      double numeric = (plus - minus) / (2 * kEps);
      scale = std::max(scale, std::abs(numeric));
      worst = std::max(worst, std::abs(numeric - analytic[size_t(i)]));
    }
    INFO("parameter " << k << " " << shape_str(p[k].shape()));
    CHECK(worst / scale < kTolerance);
  }
  // The output bias does not change grad_x D: the penalty does not reach it.
  CHECK_FALSE(p[5].grad().defined());
}

TEST_CASE("grad() touches no .grad, fires no grad-ready hook and is not a backward for observers",
          "[second_order][grad][engine]") {
  Variable x = random_input({4, 3}, 400);
  std::vector<Variable> p = {random_input({5, 3}, 401), random_input({5}, 402), random_input({1, 5}, 403),
                             random_input({1}, 404)};
  p[0].set_grad(Tensor::full({5, 3}, 7.0, DType::f64));
  int hooks = 0;
  for (auto& v : p) v.add_grad_ready_hook([&hooks](Variable&) { ++hooks; });
  x.add_grad_ready_hook([&hooks](Variable&) { ++hooks; });
  CountingObserver obs;
  Engine::add_observer(&obs);
  Variable d = critic(x, p);
  std::vector<Variable> g = grad({sum(d)}, {x, p[0]}, {}, {.create_graph = true});
  Variable penalty = mean(square(add_scalar(sqrt(sum(square(g[0]), 1)), -1.0)));
  CHECK(hooks == 0);
  CHECK(obs.begins == 0);
  CHECK(obs.ends == 0);
  CHECK(p[0].grad().to_vector() == std::vector<double>(15, 7.0));
  CHECK_FALSE(p[1].grad().defined());
  CHECK_FALSE(x.grad().defined());
  // The outer backward is the one backward observers and hooks see.
  penalty.backward();
  Engine::remove_observer(&obs);
  CHECK(obs.begins == 1);
  CHECK(obs.ends == 1);
  CHECK(hooks == 4);       // x, W1, b1, W2 (b2 does not reach the penalty)
  CHECK(obs.leaves == 4);  // found through the second-order graph
}

TEST_CASE("backward with create_graph: .grad as a plain backward, grad_history differentiable again",
          "[second_order][backward]") {
  Variable x = random_input({4, 3}, 700);
  std::vector<Variable> p = {random_input({5, 3}, 701), random_input({5}, 702), random_input({1, 5}, 703),
                             random_input({1}, 704)};
  // References: a plain backward's .grad, and grad() with create_graph (itself checked
  // against finite differences above) for the second-order quantity.
  sum(critic(x, p)).backward();
  std::vector<std::vector<double>> plain;
  for (auto& v : p) {
    plain.push_back(v.grad().to_vector());
    v.set_grad(Tensor());
  }
  std::vector<Variable> g_ref = grad({sum(critic(x, p))}, p, {}, {.create_graph = true});
  std::vector<Variable> second_ref =
      grad({add(sum(square(g_ref[0])), sum(square(g_ref[2])))}, p, {}, {.allow_unused = true});

  int hooks = 0;
  for (auto& v : p) v.add_grad_ready_hook([&hooks](Variable&) { ++hooks; });
  CountingObserver obs;
  Engine::add_observer(&obs);
  sum(critic(x, p)).backward({.create_graph = true});
  CHECK(obs.begins == 1);  // a backward like any other for observers (a Reducer) and hooks
  CHECK(hooks == 4);
  for (size_t i = 0; i < p.size(); ++i) {
    INFO("parameter " << i);
    CHECK(p[i].grad().to_vector() == plain[i]);
    REQUIRE(p[i].grad_history().defined());
    CHECK(p[i].grad_history().data().to_vector() == plain[i]);
  }
  CHECK(p[0].grad_history().requires_grad());
  CHECK(p[2].grad_history().requires_grad());

  Variable again = add(sum(square(p[0].grad_history())), sum(square(p[2].grad_history())));
  for (auto& v : p) v.set_grad(Tensor());  // clears grad_history as well
  CHECK_FALSE(p[0].grad_history().defined());
  again.backward();
  Engine::remove_observer(&obs);
  CHECK(obs.begins == 2);
  for (size_t i = 0; i < p.size(); ++i) {
    INFO("parameter " << i);
    if (!second_ref[i].defined()) {  // b2 does not reach the second-order loss
      CHECK_FALSE(p[i].grad().defined());
      continue;
    }
    std::vector<double> want = second_ref[i].data().to_vector(), got = p[i].grad().to_vector();
    REQUIRE(got.size() == want.size());
    for (size_t k = 0; k < got.size(); ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-12));
  }

  // A node without a second-order rule is named, as with grad().
  Tensor mean_stat = Tensor::zeros({3}, DType::f64), var_stat = Tensor::ones({3}, DType::f64);
  Variable bn = batch_norm(reshape(x, {4, 3, 1, 1}), random_input({3}, 705), random_input({3}, 706),
                           mean_stat, var_stat, true);
  CHECK_THROWS_WITH(sum(square(bn)).backward({.create_graph = true}),
                    Catch::Contains("batch_norm has no second-order rule yet"));
}

TEST_CASE("grad errors name the output or input", "[second_order][grad][errors]") {
  Variable x = random_input({2, 3}, 500);
  Variable fixed(Tensor::ones({2, 3}, DType::f64), false);
  Variable y = mul(x, x);
  CHECK_THROWS_WITH(grad({y}, {x}), Catch::Contains("grad: output 0") && Catch::Contains("[2, 3]") &&
                                        Catch::Contains("not a scalar") && Catch::Contains("grad_outputs"));
  CHECK_THROWS_WITH(grad({sum(y)}, {x, fixed}), Catch::Contains("grad: input 1") &&
                                                    Catch::Contains("does not require grad") &&
                                                    Catch::Contains("allow_unused"));
  CHECK_THROWS_WITH(grad({sum(fixed)}, {x}),
                    Catch::Contains("grad: output 0") && Catch::Contains("does not require grad"));
  CHECK_THROWS_WITH(
      grad({y}, {x}, {Variable(Tensor::ones({3, 2}, DType::f64))}),
      Catch::Contains("grad_outputs[0]") && Catch::Contains("[3, 2]") && Catch::Contains("[2, 3]"));
  std::vector<Variable> g = grad({sum(y)}, {x, fixed}, {}, {.allow_unused = true});
  CHECK(g[0].defined());
  CHECK_FALSE(g[1].defined());
  Variable other = random_input({2}, 501);
  CHECK_THROWS_WITH(grad({sum(mul(x, x))}, {other}), Catch::Contains("grad: input 0") &&
                                                         Catch::Contains("not reachable") &&
                                                         Catch::Contains("allow_unused"));
  // Without retain_graph the first grad frees the graph: a second one is a named error.
  Variable loss = sum(mul(x, x));
  grad({loss}, {x});
  CHECK_THROWS_WITH(grad({loss}, {x}),
                    Catch::Contains("'sum' a second time") && Catch::Contains("retain_graph"));
  Variable kept = sum(mul(x, x));
  std::vector<Variable> first = grad({kept}, {x}, {}, {.retain_graph = true});
  std::vector<Variable> second = grad({kept}, {x});
  CHECK(first[0].data().to_vector() == second[0].data().to_vector());
}

TEST_CASE("ops without a second-order rule raise a named error under create_graph",
          "[second_order][errors]") {
  Variable x = random_input({2, 3, 4, 4}, 600);
  Tensor mean_stat = Tensor::zeros({3}, DType::f64), var_stat = Tensor::ones({3}, DType::f64);
  Variable bn = batch_norm(x, random_input({3}, 601), random_input({3}, 602), mean_stat, var_stat, true);
  CHECK_THROWS_WITH(grad({sum(square(bn))}, {x}, {}, {.create_graph = true}),
                    Catch::Contains("batch_norm has no second-order rule yet") &&
                        Catch::Contains("WGAN-GP") && Catch::Contains("batch norm"));
  // First order through it still works.
  CHECK(grad({sum(square(bn))}, {x})[0].defined());

  // Eval mode has none either.
  Variable bn_eval =
      batch_norm(x, random_input({3}, 603), random_input({3}, 604), mean_stat, var_stat, false);
  CHECK_THROWS_WITH(
      grad({sum(square(bn_eval))}, {x}, {}, {.create_graph = true}),
      Catch::Contains("batch_norm_eval has no second-order rule yet") && Catch::Contains("WGAN-GP"));
}

TEST_CASE("grad() asks a node only for the gradients that lead to its inputs", "[second_order][grad]") {
  // An op whose backward records which inputs it was asked for.
  std::vector<bool> asked;
  Variable a = random_input({2}, 700), b = random_input({2}, 701);
  auto probe_op = [&asked](const Variable& x, const Variable& y) {
    return make_result(kernels::mul(x.data(), y.data()), "probe", {x, y},
                       [&asked, X = x.data(), Y = y.data()](const Tensor& g, const FunctionNode& n) {
                         asked = {n.needs_input_grad(0), n.needs_input_grad(1)};
                         return std::vector<Tensor>{kernels::mul(g, Y), kernels::mul(g, X)};
                       });
  };
  grad({sum(probe_op(a, b))}, {a});
  CHECK(asked == std::vector<bool>{true, false});
  grad({sum(probe_op(a, b))}, {b});
  CHECK(asked == std::vector<bool>{false, true});
  sum(probe_op(a, b)).backward();  // a backward wants both
  CHECK(asked == std::vector<bool>{true, true});
}

TEST_CASE("second order: exp, log, pow, abs, clamp, maximum, minimum and where",
          "[second_order][pointwise]") {
  expect_second_order_matches("exp", [](const std::vector<Variable>& v) { return exp(v[0]); },
                              {random_input({3, 4}, 400)});
  expect_second_order_matches("log", [](const std::vector<Variable>& v) { return log(v[0]); },
                              {positive(random_input({3, 4}, 401))});
  for (double p : {3.0, 2.5, -1.5, 0.0}) {
    Variable x = p == 3.0 || p == 0.0 ? random_input({3, 4}, 402) : positive(random_input({3, 4}, 403));
    expect_second_order_matches("pow " + std::to_string(p),
                                [p](const std::vector<Variable>& v) { return pow(v[0], p); }, {x});
  }
  // The masked ops times a smooth factor, so their second derivatives are not all zero.
  auto both = [](uint64_t seed) {
    return std::vector<Variable>{away_from_zero(random_input({3, 4}, seed)), random_input({3, 4}, seed + 1)};
  };
  expect_second_order_matches(
      "abs(x) * y", [](const std::vector<Variable>& v) { return mul(abs(v[0]), v[1]); }, both(404));
  expect_second_order_matches(
      "clamp(x) * y", [](const std::vector<Variable>& v) { return mul(clamp(v[0], -0.04, 0.04), v[1]); },
      both(406));
  // maximum and minimum of x and x * y (apart unless y is near 1 or x near 0: x is kept off 0
  // and y in (-0.5, 0.5)).
  auto scaled = [](uint64_t seed) {
    Variable y = random_input({3, 4}, seed + 1, 0.1);
    return std::vector<Variable>{away_from_zero(random_input({3, 4}, seed)), y};
  };
  expect_second_order_matches(
      "maximum(x, x * y)", [](const std::vector<Variable>& v) { return maximum(v[0], mul(v[0], v[1])); },
      scaled(408));
  expect_second_order_matches(
      "minimum(x, x * y)", [](const std::vector<Variable>& v) { return minimum(v[0], mul(v[0], v[1])); },
      scaled(410));
  const Tensor condition = Tensor::from_values({3, 1}, {1, 0, 1}, DType::f64);
  expect_second_order_matches(
      "where(c, x * y, square(y))",
      [condition](const std::vector<Variable>& v) { return where(condition, mul(v[0], v[1]), square(v[1])); },
      {random_input({3, 4}, 412), random_input({4}, 413)});
}

TEST_CASE("second order: max, logsumexp, log_softmax, softmax and cross_entropy", "[second_order][softmax]") {
  expect_second_order_matches(
      "max(x) * y", [](const std::vector<Variable>& v) { return mul(max(v[0], 1, true).values, v[1]); },
      {random_input({3, 4}, 600), random_input({3, 1}, 601)});
  expect_second_order_matches("logsumexp", [](const std::vector<Variable>& v) { return logsumexp(v[0], 1); },
                              {random_input({3, 4}, 602)});
  expect_second_order_matches("log_softmax",
                              [](const std::vector<Variable>& v) { return log_softmax(v[0], 1); },
                              {random_input({3, 4}, 603)});
  expect_second_order_matches("softmax", [](const std::vector<Variable>& v) { return softmax(v[0], 0); },
                              {random_input({3, 4}, 604)});
  Tensor target = Tensor::empty({3}, DType::i64);
  for (int64_t i = 0; i < 3; ++i) target.data<int64_t>()[i] = (2 * i + 1) % 4;
  expect_second_order_matches("cross_entropy smoothed",
                              [target](const std::vector<Variable>& v) {
                                return cross_entropy(v[0], target, {.label_smoothing = 0.1});
                              },
                              {random_input({3, 4}, 605)});
}

TEST_CASE("second order: group_norm and layer_norm", "[second_order][nn]") {
  expect_second_order_matches(
      "group_norm", [](const std::vector<Variable>& v) { return nn::group_norm(v[0], 2, v[1], v[2], 1e-3); },
      {random_input({2, 4, 2, 2}, 710), random_input({4}, 711), random_input({4}, 712)});
  expect_second_order_matches(
      "layer_norm",
      [](const std::vector<Variable>& v) { return nn::layer_norm(v[0], {3}, v[1], v[2], 1e-3); },
      {random_input({4, 3}, 713), random_input({3}, 714), random_input({3}, 715)});
}

TEST_CASE("second order: pixel_norm and minibatch_stddev", "[second_order][nn]") {
  expect_second_order_matches("pixel_norm",
                              [](const std::vector<Variable>& v) { return nn::pixel_norm(v[0]); },
                              {random_input({3, 4}, 730)});
  expect_second_order_matches("minibatch_stddev",
                              [](const std::vector<Variable>& v) { return nn::minibatch_stddev(v[0], 2); },
                              {random_input({4, 2, 2, 2}, 731)});
}
