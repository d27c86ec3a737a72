// backward with inputs (BackwardOptions::inputs): a GAN's G step computes G's gradients
// only. The reference is the full backward of the same graph (float64).
#include <catch2/catch.hpp>
#include <set>

#include "autograd/engine.h"
#include "autograd/grad.h"
#include "autograd/ops.h"
#include "kernels/kernel_recorder.h"
#include "runtime/rng.h"

using namespace tandem;

namespace {

constexpr int64_t kBatch = 5;

// G: 4 -> 7 -> 3, D: 3 -> 6 -> 1 (every GEMM shape distinct), float64.
struct TinyGan {
  TinyGan() {
    Generator gen(17);
    auto param = [&gen](const Shape& shape) { return randn(shape, gen, true, DType::f64); };
    g = {param({7, 4}), param({7}), param({3, 7}), param({3})};
    d = {param({6, 3}), param({6}), param({1, 6}), param({1})};
    z = randn({kBatch, 4}, gen, false, DType::f64);
  }
  Variable loss_g() const {
    Variable fake = tanh(linear(relu(linear(z, g[0], g[1])), g[2], g[3]));
    Variable score = linear(leaky_relu(linear(fake, d[0], d[1]), 0.2), d[2], d[3]);
    return mean(softplus(-score));
  }
  std::vector<Variable> g, d;
  Variable z;
};

std::vector<std::vector<double>> grads_of(const std::vector<Variable>& params) {
  std::vector<std::vector<double>> out;
  for (const Variable& p : params)
    out.push_back(p.grad().defined() ? p.grad().to_vector() : std::vector<double>{});
  return out;
}

// The weight-gradient GEMMs (g^T x: m = out, n = in, k = batch) issued for these weights.
int64_t weight_grad_gemms(const kernels::KernelRecord& record, const std::vector<Variable>& weights) {
  int64_t n = 0;
  for (const auto& [call, count] : record.gemms) {
    for (const Variable& w : weights) {
      if (w.dim() == 2 && call.m == w.size(0) && call.n == w.size(1) && call.k == kBatch) n += count;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("backward with inputs: G's gradients equal the full backward's, D's .grad and hooks untouched",
          "[engine][inputs]") {
  TinyGan full;
  full.loss_g().backward();

  TinyGan scoped;
  // D holds gradients from an earlier step (one of them none): the G step must leave them.
  scoped.d[0].set_grad(Tensor::full({6, 3}, 0.25, DType::f64));
  scoped.d[2].set_grad(Tensor::full({1, 6}, -1.5, DType::f64));
  const std::vector<std::vector<double>> d_before = grads_of(scoped.d);
  int d_hooks = 0, g_hooks = 0;
  for (Variable& p : scoped.d) p.add_grad_ready_hook([&](Variable&) { ++d_hooks; });
  for (Variable& p : scoped.g) p.add_grad_ready_hook([&](Variable&) { ++g_hooks; });
  scoped.loss_g().backward({.inputs = scoped.g});

  CHECK(grads_of(scoped.g) == grads_of(full.g));  // bitwise: the same rules in the same order
  CHECK(grads_of(scoped.d) == d_before);
  CHECK_FALSE(scoped.d[1].grad().defined());
  CHECK(d_hooks == 0);
  CHECK(g_hooks == 4);
}

TEST_CASE("backward with inputs: a subset of G, and the observer sees reached and requested leaves only",
          "[engine][inputs]") {
  struct Seen : BackwardObserver {
    std::set<VariableImpl*> leaves;
    bool restricted = false;
    void on_backward_begin(const BackwardPass& pass) override {
      for (const auto& l : pass.reachable_leaves()) leaves.insert(l.get());
      restricted = pass.restricted();
    }
    void on_backward_end(const BackwardPass&) override {}
  } seen;
  TinyGan full, scoped;
  full.loss_g().backward();
  Variable unreached = randn({2}, true, DType::f64);
  Engine::add_observer(&seen);
  scoped.loss_g().backward({.inputs = std::vector<Variable>{scoped.g[2], scoped.d[0], unreached}});
  Engine::remove_observer(&seen);
  CHECK(seen.restricted);
  CHECK(seen.leaves == std::set<VariableImpl*>{scoped.g[2].impl(), scoped.d[0].impl()});
  CHECK(scoped.g[2].grad().to_vector() == full.g[2].grad().to_vector());
  CHECK(scoped.d[0].grad().to_vector() == full.d[0].grad().to_vector());
  for (size_t i : {0, 1, 3}) CHECK_FALSE(scoped.g[i].grad().defined());
  for (size_t i : {1, 2, 3}) CHECK_FALSE(scoped.d[i].grad().defined());
  CHECK_FALSE(unreached.grad().defined());
}

TEST_CASE("backward with inputs: a G-step backward issues no weight-gradient GEMM for D",
          "[engine][inputs]") {
  TinyGan gan;
  const std::vector<Variable> d_weights = {gan.d[0], gan.d[2]}, g_weights = {gan.g[0], gan.g[2]};

  Variable loss = gan.loss_g();
  kernels::start_kernel_recording();
  loss.backward();
  const kernels::KernelRecord full = kernels::stop_kernel_recording();
  CHECK(weight_grad_gemms(full, d_weights) == 2);  // the count sees them when they happen
  CHECK(weight_grad_gemms(full, g_weights) == 2);

  loss = gan.loss_g();
  kernels::start_kernel_recording();
  loss.backward({.inputs = gan.g});
  const kernels::KernelRecord scoped = kernels::stop_kernel_recording();
  CHECK(weight_grad_gemms(scoped, d_weights) == 0);
  CHECK(weight_grad_gemms(scoped, g_weights) == 2);
  int64_t total_full = 0, total_scoped = 0;
  for (const auto& [call, count] : full.gemms) total_full += count;
  for (const auto& [call, count] : scoped.gemms) total_scoped += count;
  CHECK(total_full - total_scoped == 2);  // D's two weight gradients, nothing else
}

TEST_CASE("backward with inputs and create_graph: the requested leaves' grad_history matches the full one's",
          "[engine][inputs][second_order]") {
  TinyGan full, scoped;
  full.loss_g().backward({.create_graph = true});
  scoped.loss_g().backward({.create_graph = true, .inputs = scoped.g});
  for (size_t i = 0; i < 4; ++i) {
    REQUIRE(scoped.g[i].grad_history().defined());
    CHECK(scoped.g[i].grad_history().data().to_vector() == full.g[i].grad_history().data().to_vector());
    CHECK_FALSE(scoped.d[i].grad_history().defined());
    CHECK_FALSE(scoped.d[i].grad().defined());
  }
  // Differentiating a function of G's gradient again works as with the full backward.
  Variable penalty_full = sum(square(full.g[2].grad_history()));
  Variable penalty_scoped = sum(square(scoped.g[2].grad_history()));
  std::vector<Variable> a = grad({penalty_full}, {full.g[0]});
  std::vector<Variable> b = grad({penalty_scoped}, {scoped.g[0]});
  CHECK(b[0].data().to_vector() == a[0].data().to_vector());
}

TEST_CASE("backward with inputs: errors name a non-leaf or frozen input; an empty list runs nothing",
          "[engine][inputs][errors]") {
  TinyGan gan;
  Variable loss = gan.loss_g();
  Variable hidden = relu(linear(gan.z, gan.g[0], gan.g[1]));
  CHECK_THROWS_WITH(loss.backward({.retain_graph = true, .inputs = std::vector<Variable>{hidden}}),
                    Catch::Contains("is not a leaf"));
  gan.d[0].set_requires_grad(false);
  gan.d[0].set_name("D.fc1.weight");
  CHECK_THROWS_WITH(loss.backward({.retain_graph = true, .inputs = std::vector<Variable>{gan.d[0]}}),
                    Catch::Contains("'D.fc1.weight'") && Catch::Contains("does not require grad"));
  gan.d[0].set_requires_grad(true);
  loss.backward({.inputs = std::vector<Variable>{}});
  for (const Variable& p : gan.g) CHECK_FALSE(p.grad().defined());
  for (const Variable& p : gan.d) CHECK_FALSE(p.grad().defined());
}

TEST_CASE("backward with inputs frees only the nodes that ran", "[backward_inputs]") {
  Variable x(Tensor::full({3}, 1.5, DType::f64), true);
  Variable w(Tensor::full({2}, -0.5, DType::f64), true);
  Variable of_w = sum(w * w);  // leads to w alone
  Variable loss = sum(x * x) + of_w;
  loss.backward({.inputs = std::vector<Variable>{x}});  // of_w's nodes do not run
  CHECK(x.grad().to_vector() == std::vector<double>{3.0, 3.0, 3.0});
  CHECK_FALSE(w.grad().defined());
  of_w.backward();  // its saved tensors are still there
  CHECK(w.grad().to_vector() == std::vector<double>{-1.0, -1.0});
}

TEST_CASE("backward's inputs take a braced list of one or several Variables; empty braces leave them unset",
          "[engine][inputs]") {
  Variable x(Tensor::full({3}, 1.5, DType::f64), true);
  Variable w(Tensor::full({2}, -0.5, DType::f64), true);
  Variable loss = sum(x * x) + sum(w * w);
  loss.backward({.retain_graph = true, .inputs = {x}});
  CHECK(x.grad().to_vector() == std::vector<double>{3.0, 3.0, 3.0});
  CHECK_FALSE(w.grad().defined());
  loss.backward({.retain_graph = true, .inputs = {x, w}});
  CHECK(x.grad().to_vector() == std::vector<double>{6.0, 6.0, 6.0});
  CHECK(w.grad().to_vector() == std::vector<double>{-1.0, -1.0});
  loss.backward({.inputs = {}});  // every reachable leaf
  CHECK(x.grad().to_vector() == std::vector<double>{9.0, 9.0, 9.0});
  CHECK(w.grad().to_vector() == std::vector<double>{-2.0, -2.0});
  const BackwardInputs none = std::vector<Variable>{};
  CHECK((none.has_value() && none->empty()));
  CHECK_FALSE(BackwardInputs{}.has_value());
}
