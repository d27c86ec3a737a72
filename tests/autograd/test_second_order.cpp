// Second-order gradients: grad() with create_graph against finite differences of the
// first-order gradient (float64), a WGAN-GP penalty on a tiny critic, grad()'s seams (no
// .grad, no hooks, no observer) and its named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad.h"
#include "autograd/gradcheck.h"
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

  Variable w = random_input({2, 3, 3, 3}, 603);
  Variable y = conv2d(x, w, Variable(), {.stride = 1, .padding = 1});
  CHECK_THROWS_WITH(grad({sum(square(y))}, {x}, {}, {.create_graph = true}),
                    Catch::Contains("conv2d has no second-order rule yet"));
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
