// The backward engine and its seams: reachability, hook-once, two roots, observers.
#include <algorithm>
#include <catch2/catch.hpp>
#include <set>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

using namespace tandem;

namespace {

std::set<VariableImpl*> as_set(const std::vector<std::shared_ptr<VariableImpl>>& leaves) {
  std::set<VariableImpl*> s;
  for (const auto& l : leaves) s.insert(l.get());
  return s;
}

struct RecordingObserver : BackwardObserver {
  std::vector<std::set<VariableImpl*>> begins;
  int ends = 0;
  void on_backward_begin(const BackwardPass& pass) override {
    begins.push_back(as_set(pass.reachable_leaves()));
  }
  void on_backward_end(const BackwardPass&) override { ++ends; }
};

}  // namespace

TEST_CASE("a leaf reached through three paths fires its hook once with the summed gradient",
          "[engine][hooks]") {
  Variable w = tensor({2}, {1.5, -2.0}, true);
  int fired = 0;
  std::vector<double> seen;
  w.add_grad_ready_hook([&](Variable& v) {
    ++fired;
    seen = v.grad().to_vector();
  });
  // loss = sum(w) + sum(3 w) + sum(w * w): d/dw = 1 + 3 + 2w
  Variable loss = sum(w) + sum(scale(w, 3.0)) + sum(w * w);
  loss.backward();
  CHECK(fired == 1);
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == Approx(1 + 3 + 2 * 1.5));
  CHECK(seen[1] == Approx(1 + 3 + 2 * -2.0));
  // A second backward accumulates and fires once more.
  Variable loss2 = sum(w);
  loss2.backward();
  CHECK(fired == 2);
  CHECK(w.grad().to_vector()[0] == Approx(7.0 + 1.0));
}

TEST_CASE("backward from a D-only loss fires no hook for G's parameters", "[engine][hooks]") {
  Variable g_w = tensor({1, 2}, {0.5, -0.5}, true);  // "generator" weight
  Variable d_w = tensor({1, 2}, {1.0, 2.0}, true);   // "discriminator" weight
  int g_fired = 0, d_fired = 0;
  g_w.add_grad_ready_hook([&](Variable&) { ++g_fired; });
  d_w.add_grad_ready_hook([&](Variable&) { ++d_fired; });
  Variable z = tensor({3, 1}, {1.0, 2.0, 3.0});
  Variable fake = matmul(z, g_w);                            // G(z): [3, 2]
  Variable d_out = matmul(fake.detach(), d_w, false, true);  // D(G(z).detach())
  RecordingObserver obs;
  Engine::add_observer(&obs);
  mean(d_out).backward();
  Engine::remove_observer(&obs);
  CHECK(d_fired == 1);
  CHECK(g_fired == 0);
  CHECK_FALSE(g_w.grad().defined());
  REQUIRE(obs.begins.size() == 1);
  CHECK(obs.begins[0] == std::set<VariableImpl*>{d_w.impl()});
  CHECK(obs.ends == 1);
}

TEST_CASE("two backwards from two roots of one forward graph both work", "[engine]") {
  Variable a = tensor({2}, {1.0, 2.0}, true);
  Variable b = tensor({2}, {3.0, 4.0}, true);
  Variable h = a * b;        // shared part
  Variable r1 = sum(h);      // d/da = b
  Variable r2 = sum(h * a);  // d/da = 2ab, d/db = a^2
  r1.backward(Tensor(), /*retain_graph=*/true);
  CHECK(a.grad().to_vector() == std::vector<double>{3.0, 4.0});
  r2.backward();
  CHECK(a.grad().to_vector() == std::vector<double>{3.0 + 6.0, 4.0 + 16.0});
  CHECK(b.grad().to_vector() == std::vector<double>{1.0 + 1.0, 2.0 + 4.0});
  // Without retain_graph the shared part is freed: a third backward through it is a named error.
  Variable r3 = sum(h);
  CHECK_THROWS_WITH(r3.backward(), Catch::Contains("backward through 'mul' a second time") &&
                                       Catch::Contains("retain_graph"));
}

TEST_CASE("several roots in one backward, and the reachable-leaf query", "[engine]") {
  Variable a = tensor({1}, {2.0}, true), b = tensor({1}, {3.0}, true), c = tensor({1}, {5.0}, true);
  Variable unused = tensor({1}, {7.0}, true);
  Variable frozen = tensor({1}, {11.0}, false);
  Variable r1 = a * b, r2 = b * c + frozen;
  CHECK(as_set(reachable_leaves({r1})) == std::set<VariableImpl*>{a.impl(), b.impl()});
  CHECK(as_set(reachable_leaves({r2})) == std::set<VariableImpl*>{b.impl(), c.impl()});
  CHECK(as_set(reachable_leaves({r1, r2})) == std::set<VariableImpl*>{a.impl(), b.impl(), c.impl()});
  backward({sum(r1), sum(r2)});
  CHECK(a.grad().item() == 3.0);
  CHECK(b.grad().item() == 2.0 + 5.0);
  CHECK(c.grad().item() == 3.0);
  CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("no_grad records nothing, detach cuts history", "[engine]") {
  Variable a = tensor({2}, {1.0, 2.0}, true);
  {
    NoGradGuard guard;
    Variable y = a * a;
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  Variable y = a * a;
  CHECK(y.requires_grad());
  CHECK(y.grad_fn() != nullptr);
  CHECK_FALSE(y.detach().requires_grad());
  CHECK(y.detach().data().shares_storage_with(y.data()));
}

TEST_CASE("backward errors name the problem", "[engine][errors]") {
  Variable a = tensor({2}, {1.0, 2.0}, true);
  Variable y = a * a;
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("is not a scalar; pass a seed gradient"));
  Variable c = tensor({1}, {1.0}, false);
  CHECK_THROWS_WITH(c.backward(), Catch::Contains("does not require grad"));
  CHECK_THROWS_WITH(y.backward(Tensor::ones({3}, DType::f32)), Catch::Contains("does not match root"));
}

TEST_CASE("the observer sees the end even when the backward throws", "[engine]") {
  Variable a = tensor({2}, {1.0, 2.0}, true);
  a.add_grad_ready_hook([](Variable&) { TANDEM_FAIL("hook failure"); });
  RecordingObserver obs;
  Engine::add_observer(&obs);
  CHECK_THROWS_WITH(sum(a).backward(), Catch::Contains("hook failure"));
  Engine::remove_observer(&obs);
  CHECK(obs.begins.size() == 1);
  CHECK(obs.ends == 1);
}

TEST_CASE("a parameter's hook fires as soon as its gradient is complete, before earlier layers' backward",
          "[engine][hooks]") {
  // x -> A(w1 * x) -> w2 * . -> sum. w2's gradient is complete once the last op's backward
  // ran; A's backward (the earlier layer) is still to come. The hook must not wait for it.
  // The second iteration is the one that matters: by then each leaf's accumulator is older
  // than every op node of the new forward.
  Variable x = tensor({3}, {0.5, -1.0, 2.0});
  Variable w1 = tensor({3}, {1.0, 2.0, 3.0}, true), w2 = tensor({3}, {-1.0, 0.5, 0.25}, true);
  std::vector<std::string> log;
  w1.add_grad_ready_hook([&](Variable&) { log.push_back("w1 ready"); });
  w2.add_grad_ready_hook([&](Variable&) { log.push_back("w2 ready"); });
  for (int iteration = 0; iteration < 2; ++iteration) {
    log.clear();
    Variable h = w1 * x;
    Variable tagged = make_result(h.data().clone(), "tagged", {h}, [&](const Tensor& g, const FunctionNode&) {
      log.push_back("earlier layer's backward");
      return std::vector<Tensor>{g};
    });
    Variable loss = sum(w2 * tagged);
    loss.backward();
    INFO("iteration " << iteration);
    CHECK(log == std::vector<std::string>{"w2 ready", "earlier layer's backward", "w1 ready"});
  }
  CHECK(w1.grad().to_vector() == std::vector<double>{2 * -1.0 * 0.5, 2 * 0.5 * -1.0, 2 * 0.25 * 2.0});
}
