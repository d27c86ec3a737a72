// Optimizers against hand-computed reference values (3 steps, given gradients), their
// state dicts, and the vectorised Adam path against a plain reference loop.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/ops.h"
#include "autograd/optim.h"

using namespace tandem;

namespace {

// Runs three steps of `opt` on `p`, setting the given gradient before each, and returns
// the parameter values after each step.
template <typename Opt>
std::vector<std::vector<double>> run3(Opt& opt, Variable& p, const std::vector<std::vector<double>>& grads) {
  std::vector<std::vector<double>> out;
  for (const auto& g : grads) {
    opt.zero_grad();
    p.set_grad(Tensor::from_values(p.shape(), g, p.dtype()));
    opt.step();
    out.push_back(p.data().to_vector());
  }
  return out;
}

void check_close(const std::vector<std::vector<double>>& got, const std::vector<std::vector<double>>& want,
                 double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s) {
    REQUIRE(got[s].size() == want[s].size());
    for (size_t i = 0; i < got[s].size(); ++i) {
      INFO("step " << s + 1 << ", element " << i);
      CHECK(got[s][i] == Approx(want[s][i]).epsilon(rel).margin(rel));
    }
  }
}

// float64 must match the hand values to rounding; float32 to its precision.
double tol(DType d) { return d == DType::f64 ? 1e-12 : 2e-6; }

}  // namespace

TEST_CASE("SGD with momentum matches hand-computed values", "[optim][sgd]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({2}, {1.0, -0.5}, true, dt);
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
    // b_1 = g_1; b_t = 0.9 b_{t-1} + g_t; p_t = p_{t-1} - 0.1 b_t
    // element 0, g = 1, 2, -1:
    //   t=1: b = 1                    p = 1    - 0.1   = 0.9
    //   t=2: b = 0.9*1 + 2   = 2.9    p = 0.9  - 0.29  = 0.61
    //   t=3: b = 0.9*2.9 - 1 = 1.61   p = 0.61 - 0.161 = 0.449
    // element 1, g = -2, 0, 4:
    //   t=1: b = -2                      p = -0.5  + 0.2   = -0.3
    //   t=2: b = 0.9*-2 + 0    = -1.8    p = -0.3  + 0.18  = -0.12
    //   t=3: b = 0.9*-1.8 + 4  = 2.38    p = -0.12 - 0.238 = -0.358
    auto got = run3(opt, p, {{1, -2}, {2, 0}, {-1, 4}});
    check_close(got, {{0.9, -0.3}, {0.61, -0.12}, {0.449, -0.358}}, tol(dt));
    CHECK(opt.step_count(0) == 3);
  }
}

TEST_CASE("SGD with Nesterov momentum matches hand-computed values", "[optim][sgd]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({1}, {1.0}, true, dt);
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
    // b as plain momentum; the step uses g + 0.9 b. g = 1, 2, -1:
    //   t=1: b = 1      g' = 1 + 0.9*1     = 1.9     p = 1     - 0.19   = 0.81
    //   t=2: b = 2.9    g' = 2 + 0.9*2.9   = 4.61    p = 0.81  - 0.461  = 0.349
    //   t=3: b = 1.61   g' = -1 + 0.9*1.61 = 0.449   p = 0.349 - 0.0449 = 0.3041
    auto got = run3(opt, p, {{1}, {2}, {-1}});
    check_close(got, {{0.81}, {0.349}, {0.3041}}, tol(dt));
  }
}

TEST_CASE("SGD with dampening and with weight decay matches hand-computed values", "[optim][sgd]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({1}, {1.0}, true, dt);
    optim::SGD damp({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    // b_1 = g_1 (no dampening on the first step); b_t = 0.9 b + 0.5 g. g = 1, 2, -1:
    //   t=1: b = 1                       p = 1    - 0.1   = 0.9
    //   t=2: b = 0.9 + 0.5*2     = 1.9   p = 0.9  - 0.19  = 0.71
    //   t=3: b = 0.9*1.9 - 0.5   = 1.21  p = 0.71 - 0.121 = 0.589
    check_close(run3(damp, p, {{1}, {2}, {-1}}), {{0.9}, {0.71}, {0.589}}, tol(dt));

    Variable q = tensor({1}, {2.0}, true, dt);
    optim::SGD wd({q}, {.lr = 0.1, .weight_decay = 0.5});
    // g' = g + 0.5 p; p -= 0.1 g'. g = 1, 2, -1:
    //   t=1: g' = 1 + 0.5*2      = 2        p = 2    - 0.2     = 1.8
    //   t=2: g' = 2 + 0.5*1.8    = 2.9      p = 1.8  - 0.29    = 1.51
    //   t=3: g' = -1 + 0.5*1.51  = -0.245   p = 1.51 + 0.0245  = 1.5345
    check_close(run3(wd, q, {{1}, {2}, {-1}}), {{1.8}, {1.51}, {1.5345}}, tol(dt));
  }
}

TEST_CASE("Adam matches hand-computed values", "[optim][adam]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({2}, {1.0, -0.5}, true, dt);
    optim::Adam opt({p}, {.lr = 0.1, .betas = {0.9, 0.999}, .eps = 1e-8});
    // m = 0.9 m + 0.1 g; v = 0.999 v + 0.001 g^2; m^ = m / (1 - 0.9^t); v^ = v / (1 - 0.999^t);
    // p -= 0.1 m^ / (sqrt(v^) + 1e-8). Worked in 40-digit decimal arithmetic:
    // element 0, g = 1, 2, -1:
    //   t=1: m = 0.1,   v = 0.001;      m^ = 1,              v^ = 1,              sqrt 1
    //        update 0.1 / (1 + 1e-8) = 0.099999999000            p = 0.900000001
    //   t=2: m = 0.29,  v = 0.004999;   m^ = 0.29/0.19 = 1.526315789474,
    //        v^ = 0.004999/0.001999 = 2.500750375188, sqrt 1.581376101750,
    //        update 0.096518201972                                p = 0.803481799028166
    //   t=3: m = 0.161, v = 0.005994001; m^ = 0.161/0.271 = 0.594095940959,
    //        v^ = 0.005994001/0.002997001 = 1.999999666333, sqrt 1.414213444404,
    //        update 0.042008930060                                p = 0.761472868968186
    // element 1, g = -2, 0, 4:
    //   t=1: m = -0.2,  v = 0.004;      m^ = -2, v^ = 4, sqrt 2; update -0.1*2/(2 + 1e-8) = -0.0999999995
    //                                                             p = -0.4000000005
    //   t=2: m = -0.18, v = 0.003996;   m^ = -0.947368421053, v^ = 1.998999499750, sqrt 1.413859787868,
    //        update -0.067005824940                               p = -0.332994175560267
    //   t=3: m = 0.238, v = 0.019992004; m^ = 0.878228782288, v^ = 6.670669779556, sqrt 2.582763980614,
    //        update 0.034003446907                                p = -0.366997622467512
    auto got = run3(opt, p, {{1, -2}, {2, 0}, {-1, 4}});
    check_close(got,
                {{0.900000001, -0.4000000005},
                 {0.803481799028166, -0.332994175560267},
                 {0.761472868968186, -0.366997622467512}},
                tol(dt));
  }
}

TEST_CASE("Adam with L2 weight decay matches hand-computed values", "[optim][adam]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({1}, {1.0}, true, dt);
    optim::Adam opt({p}, {.lr = 0.1, .betas = {0.9, 0.999}, .eps = 1e-8, .weight_decay = 0.1});
    // g' = g + 0.1 p, then Adam as above on g'. g = 1, 2, -1:
    //   t=1: g' = 1 + 0.1*1 = 1.1; m = 0.11, v = 0.00121; m^ = 1.1, v^ = 1.21, sqrt 1.1;
    //        update 0.1*1.1/(1.1 + 1e-8) = 0.099999999091       p = 0.900000000909091
    //   t=2: g' = 2 + 0.1*0.900000000909 = 2.090000000091; m = 0.308000000009, v = 0.005576890000;
    //        m^ = 1.621052631627, v^ = 2.789839920150, sqrt 1.670281389512;
    //        update 0.097052666221                               p = 0.802947334687673
    //   t=3: g' = -1 + 0.1*0.802947334688 = -0.919705266531; m = 0.185229473355, v = 0.006417170888;
    //        m^ = 0.683503591716, v^ = 2.141197446269, sqrt 1.463283105304;
    //        update 0.046710276676                               p = 0.756237058011380
    check_close(run3(opt, p, {{1}, {2}, {-1}}),
                {{0.900000000909091}, {0.802947334687673}, {0.756237058011380}}, tol(dt));
  }
}

TEST_CASE("AdamW matches hand-computed values", "[optim][adam]") {
  for (DType dt : {DType::f64, DType::f32}) {
    Variable p = tensor({2}, {1.0, -0.5}, true, dt);
    optim::AdamW opt({p}, {.lr = 0.1, .betas = {0.5, 0.999}, .eps = 1e-8, .weight_decay = 0.1});
    // p *= 1 - 0.1*0.1 = 0.99 first; then m = 0.5 m + 0.5 g, v = 0.999 v + 0.001 g^2,
    // m^ = m / (1 - 0.5^t) (bc1 = 0.5, 0.75, 0.875), v^ as for Adam; p -= 0.1 m^ / (sqrt(v^) + 1e-8).
    // element 0, g = 1, 2, -1:
    //   t=1: p = 0.99;  m = 0.5,   m^ = 1, v^ = 1;   update 0.099999999        p = 0.890000001
    //   t=2: p = 0.88110000099; m = 1.25, m^ = 1.666666666667, v^ = 2.500750375188, sqrt 1.581376101750,
    //        update 0.105393438935                                          p = 0.775706562055238
    //   t=3: p = 0.767949496434; m = 0.125, m^ = 0.142857142857, v^ = 1.999999666333, sqrt 1.414213444404,
    //        update 0.010101526217                                          p = 0.757847970217956
    // element 1, g = -2, 0, 4:
    //   t=1: p = -0.495; m = -1, m^ = -2, v^ = 4, sqrt 2; update -0.0999999995  p = -0.3950000005
    //   t=2: p = -0.391050000495; m = -0.5, m^ = -0.666666666667, v^ = 1.998999499750, sqrt 1.413859787868,
    //        update -0.047152247180                                         p = -0.343897753315188
    //   t=3: p = -0.340458775782; m = 1.75, m^ = 2, v^ = 6.670669779556, sqrt 2.582763980614,
    //        update 0.077436421108                                          p = -0.417895196890132
    auto got = run3(opt, p, {{1, -2}, {2, 0}, {-1, 4}});
    check_close(got,
                {{0.890000001, -0.3950000005},
                 {0.775706562055238, -0.343897753315188},
                 {0.757847970217956, -0.417895196890132}},
                tol(dt));
  }
}

TEST_CASE("Adam's float32 fast path agrees with a plain reference loop", "[optim][adam]") {
  // 37 elements: several 8-wide blocks and a tail, with varied gradients and weight decay.
  const int64_t n = 37;
  std::vector<double> p0(n), ref(n), m(n, 0.0), v(n, 0.0);
  for (int64_t i = 0; i < n; ++i) p0[i] = ref[i] = std::sin(0.7 * static_cast<double>(i)) * 2.0;
  Variable p = tensor({n}, p0, true, DType::f32);
  const double lr = 0.05, b1 = 0.8, b2 = 0.99, eps = 1e-6, wd = 0.01;
  optim::Adam opt({p}, {.lr = lr, .betas = {b1, b2}, .eps = eps, .weight_decay = wd});
  for (int t = 1; t <= 5; ++t) {
    std::vector<double> g(n);
    for (int64_t i = 0; i < n; ++i)
      g[i] = std::cos(0.3 * static_cast<double>(i * t)) * (1.0 + 0.1 * static_cast<double>(i));
    p.set_grad(Tensor::from_values({n}, g, DType::f32));
    opt.step();
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[i] + wd * ref[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      ref[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  auto got = p.data().to_vector();
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(ref[i]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("optimizers skip parameters without a gradient and zero_grad clears or zeroes", "[optim]") {
  Variable a = tensor({2}, {1.0, 2.0}, true), b = tensor({1}, {3.0}, true);
  optim::Adam opt({a, b}, {.lr = 0.1});
  a.set_grad(Tensor::from_values({2}, {1.0, 1.0}));
  opt.step();
  CHECK(a.data().to_vector() != std::vector<double>{1.0, 2.0});
  CHECK(b.data().to_vector() == std::vector<double>{3.0});
  CHECK(opt.step_count(0) == 1);
  CHECK(opt.step_count(1) == 0);
  Tensor grad_handle = a.grad();
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().shares_storage_with(grad_handle));  // zeroed in place
  CHECK(a.grad().to_vector() == std::vector<double>{0.0, 0.0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  opt.step();  // nothing has a grad: nothing changes
  CHECK(opt.step_count(0) == 1);
}

TEST_CASE("optimizer state dicts round-trip and reject bad entries by name", "[optim][state]") {
  Variable p = tensor({2}, {1.0, -0.5}, true);
  p.set_name("net.weight");
  optim::Adam opt({p}, {.lr = 0.1});
  for (double g : {1.0, -2.0}) {
    p.set_grad(Tensor::from_values({2}, {g, 0.5 * g}));
    opt.step();
  }
  StateDict sd = opt.state_dict();
  CHECK(sd.count("lr") == 1);
  CHECK(sd.at("state.0.step").dtype() == DType::i64);
  CHECK(sd.at("state.0.step").data<int64_t>()[0] == 2);
  CHECK(sd.at("state.0.exp_avg").shape() == Shape{2});
  CHECK(sd.at("state.0.exp_avg_sq").shape() == Shape{2});

  // A second optimizer restored from the first continues identically.
  Variable q = tensor({2}, p.data().to_vector(), true);
  q.set_name("net.weight");
  optim::Adam restored({q}, {.lr = 0.5});
  StateDict snapshot;
  for (const auto& [k, t] : sd) snapshot.emplace(k, t.clone());
  restored.load_state_dict(snapshot);
  CHECK(restored.lr() == 0.1);
  CHECK(restored.step_count(0) == 2);
  p.set_grad(Tensor::from_values({2}, {0.3, -0.7}));
  q.set_grad(Tensor::from_values({2}, {0.3, -0.7}));
  opt.step();
  restored.step();
  CHECK(q.data().to_vector() == p.data().to_vector());

  StateDict bad = snapshot;
  bad["state.0.exp_avg"] = Tensor::zeros({3});
  CHECK_THROWS_WITH(restored.load_state_dict(bad), Catch::Contains("state.0.exp_avg") &&
                                                       Catch::Contains("net.weight") &&
                                                       Catch::Contains("[3]") && Catch::Contains("[2]"));
  StateDict out_of_range = snapshot;
  out_of_range["state.4.step"] = Tensor::scalar(1.0);
  CHECK_THROWS_WITH(restored.load_state_dict(out_of_range), Catch::Contains("state.4.step"));
  CHECK(restored.step_count(0) == 3);  // a failed load changes nothing

  // Missing, non-finite or impossible state is refused by name, and changes nothing.
  struct Bad {
    std::string entry;
    Tensor value;  // undefined: the entry is removed
    std::string message;
  };
  const Bad bads[] = {
      {"state.0.exp_avg", Tensor(), "no entry 'state.0.exp_avg' for parameter 'net.weight'"},
      {"state.0.step", Tensor(), "has moments but no entry 'state.0.step'"},
      {"lr", Tensor(), "no entry 'lr'"},
      {"lr", Tensor::scalar(INFINITY, DType::f64), "not a positive finite learning rate"},
      {"lr", Tensor::scalar(-1e-3, DType::f64), "not a positive finite learning rate"},
      {"state.0.step", Tensor::scalar(-5.0, DType::f64), "not a step count"},
      {"state.0.step", Tensor::scalar(2.5, DType::f64), "not a step count"},
      {"state.0.exp_avg", Tensor::from_values({2}, {NAN, 0.0}), "'state.0.exp_avg' holds NaN or Inf"},
      {"state.0.exp_avg_sq", Tensor::from_values({2}, {1.0, -1e-3}), "negative second moment"},
  };
  for (const Bad& b : bads) {
    INFO(b.entry << ": " << b.message);
    StateDict broken = snapshot;
    if (b.value.defined()) {
      broken[b.entry] = b.value;
    } else {
      broken.erase(b.entry);
    }
    CHECK_THROWS_WITH(restored.load_state_dict(broken), Catch::Contains(b.message));
    CHECK(restored.step_count(0) == 3);
  }

  StateDict older = snapshot;  // checkpoints from before the integer dtypes hold a float64 step
  older["state.0.step"] = Tensor::scalar(7.0, DType::f64);
  restored.load_state_dict(older);
  CHECK(restored.step_count(0) == 7);
}

TEST_CASE("optimizers reject bad options and parameter lists", "[optim]") {
  Variable p = tensor({1}, {1.0}, true);
  CHECK_THROWS_WITH(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Catch::Contains("Nesterov"));
  CHECK_THROWS_WITH(optim::Adam({p}, {.betas = {1.0, 0.999}}), Catch::Contains("beta1"));
  CHECK_THROWS_WITH(optim::Adam({}, {}), Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(optim::Adam({p, p}, {}), Catch::Contains("more than once"));
}
