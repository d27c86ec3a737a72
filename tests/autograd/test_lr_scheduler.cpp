// Learning-rate schedules (autograd/lr_scheduler.h): values against the closed-form
// formulas at chosen iterations, warm-up chained with each decay, the spec syntax and its
// errors, and the scheduler setting its optimizers' learning rates.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "autograd/ops.h"

using namespace tandem;
using namespace tandem::optim;

namespace {

double lr(const std::string& spec, int64_t i, double base = 0.1) {
  return parse_lr_schedule(spec).lr_at(base, i);
}

}  // namespace

TEST_CASE("lr schedule: linear warm-up", "[lr_scheduler]") {
  // PyTorch's LinearLR(start_factor=0.25, total_iters=8): 0.25 + 0.75 * i / 8, then 1.
  for (int64_t i : {0, 1, 4, 7})
    CHECK(lr("warmup:8:0.25", i) == Approx(0.1 * (0.25 + 0.75 * static_cast<double>(i) / 8)).epsilon(1e-12));
  CHECK(lr("warmup:8:0.25", 8) == 0.1);
  CHECK(lr("warmup:8:0.25", 1000) == 0.1);
  CHECK(lr("warmup:10", 0) == Approx(0.1 * 0.001).epsilon(1e-12));  // default start factor
}

TEST_CASE("lr schedule: cosine annealing", "[lr_scheduler]") {
  // eta_min + (base - eta_min) (1 + cos(pi i / T)) / 2 with eta_min = 0.1 base.
  const double eta_min = 0.01;
  for (int64_t i : {0, 1, 25, 50, 99, 100}) {
    const double expected =
        eta_min + (0.1 - eta_min) * (1 + std::cos(std::numbers::pi * static_cast<double>(i) / 100)) / 2;
    CHECK(lr("cosine:100:0.1", i) == Approx(expected).epsilon(1e-12));
  }
  CHECK(lr("cosine:100:0.1", 50) == Approx(0.055).epsilon(1e-12));
  CHECK(lr("cosine:100:0.1", 250) == Approx(eta_min).epsilon(1e-12));  // stays at the minimum
  CHECK(lr("cosine:100", 100) == 0.0);
}

TEST_CASE("lr schedule: step and multi-step", "[lr_scheduler]") {
  CHECK(lr("step:10:0.5", 0) == 0.1);
  CHECK(lr("step:10:0.5", 9) == 0.1);
  CHECK(lr("step:10:0.5", 10) == Approx(0.05).epsilon(1e-12));
  CHECK(lr("step:10:0.5", 35) == Approx(0.1 * 0.125).epsilon(1e-12));
  CHECK(lr("step:10", 20) == Approx(0.1 * 0.01).epsilon(1e-12));  // default gamma 0.1
  CHECK(lr("multistep:3,7:0.5", 2) == 0.1);
  CHECK(lr("multistep:3,7:0.5", 3) == Approx(0.05).epsilon(1e-12));
  CHECK(lr("multistep:3,7:0.5", 6) == Approx(0.05).epsilon(1e-12));
  CHECK(lr("multistep:3,7:0.5", 7) == Approx(0.025).epsilon(1e-12));
  CHECK(lr("multistep:3,7:0.5", 1000) == Approx(0.025).epsilon(1e-12));
  CHECK(lr("constant", 123) == 0.1);
}

TEST_CASE("lr schedule: a warm-up chained with a decay multiplies their factors", "[lr_scheduler]") {
  for (int64_t i : {0, 2, 5, 9, 10, 11, 30, 60}) {
    const double w = i < 10 ? 0.2 + 0.8 * static_cast<double>(i) / 10 : 1.0;
    const double cosine =
        (1 + std::cos(std::numbers::pi * static_cast<double>(std::min<int64_t>(i, 50)) / 50)) / 2;
    const double multistep = std::pow(0.1, (i >= 5 ? 1 : 0) + (i >= 30 ? 1 : 0));
    INFO("iteration " << i);
    CHECK(lr("warmup:10:0.2+cosine:50", i) == Approx(0.1 * w * cosine).epsilon(1e-12).margin(1e-15));
    CHECK(lr("warmup:10:0.2+multistep:5,30", i) == Approx(0.1 * w * multistep).epsilon(1e-12));
    CHECK(lr("warmup:10:0.2+step:30:0.1", i) == Approx(0.1 * w * std::pow(0.1, i / 30)).epsilon(1e-12));
    CHECK(lr("cosine:50+warmup:10:0.2", i) == lr("warmup:10:0.2+cosine:50", i));  // either order
  }
}

TEST_CASE("lr schedule: canonical text", "[lr_scheduler]") {
  CHECK(parse_lr_schedule("warmup:500+cosine:20000").str() == "warmup:500:0.001+cosine:20000:0");
  CHECK(parse_lr_schedule("multistep:100,200").str() == "multistep:100,200:0.1");
  CHECK(parse_lr_schedule("step:7:0.5").str() == "step:7:0.5");
  CHECK(parse_lr_schedule("constant").str() == "constant");
  CHECK(parse_lr_schedule("cosine:20000+warmup:500").str() ==
        parse_lr_schedule("warmup:500+cosine:20000").str());
}

TEST_CASE("lr schedule: bad specs are refused, quoting the spec and the syntax", "[lr_scheduler]") {
  auto refused = [](const std::string& spec, const std::string& why) {
    INFO(spec);
    CHECK_THROWS_WITH(parse_lr_schedule(spec),
                      Catch::Contains("learning-rate schedule '" + spec + "': " + why) &&
                          Catch::Contains("expected warmup:N[:START_FACTOR]"));
  };
  refused("linear:10", "unknown schedule 'linear'");
  refused("", "unknown schedule ''");
  refused("cosine:100+step:10", "'step:10' is a second schedule besides a warm-up");
  refused("warmup:5+warmup:6", "two warm-ups");
  refused("warmup:0", "warm-up iterations must be a whole number >= 1, got '0'");
  refused("warmup:10:0", "the warm-up's start factor must be a number in (0, 1], got '0'");
  refused("cosine:x", "cosine iterations must be a whole number >= 1, got 'x'");
  refused("cosine:10:1", "the cosine's final factor must be a number in [0, 1), got '1'");
  refused("step:10:1.5", "gamma must be a number in (0, 1], got '1.5'");
  refused("multistep:30,20", "milestones must increase, got '30,20'");
  refused("multistep:10,", "a milestone must be a whole number >= 1, got ''");
  refused("step", "'step' takes 1 or 2 value(s) after 'step'");
  refused("step:1:0.5:3", "'step:1:0.5:3' takes 1 or 2 value(s) after 'step'");
  refused("constant:1", "'constant:1' takes 0 value(s) after 'constant'");
}

TEST_CASE("LrScheduler sets every optimizer's learning rate from its own base", "[lr_scheduler]") {
  Variable p(Tensor::ones({2}), true);
  auto a = std::make_shared<SGD>(std::vector<Variable>{p}, SGDOptions{.lr = 0.1});
  auto b = std::make_shared<Adam>(std::vector<Variable>{p}, AdamOptions{.lr = 0.02});
  LrScheduler scheduler({a.get(), b.get()}, parse_lr_schedule("warmup:4:0.5+step:10:0.5"));
  CHECK(a->lr() == Approx(0.05).epsilon(1e-12));  // iteration 0 from the start
  CHECK(b->lr() == Approx(0.01).epsilon(1e-12));
  scheduler.set_iteration(2);
  CHECK(a->lr() == Approx(0.1 * 0.75).epsilon(1e-12));
  scheduler.set_iteration(12);
  CHECK(a->lr() == Approx(0.05).epsilon(1e-12));
  CHECK(b->lr() == Approx(0.01).epsilon(1e-12));
  scheduler.set_iteration(3);  // any order: a pure function of the iteration
  CHECK(b->lr() == Approx(0.02 * 0.875).epsilon(1e-12));
  CHECK_THROWS_WITH(scheduler.set_iteration(-1), Catch::Contains("iteration -1 is negative"));
}

namespace {

// Ten Adam steps on sum(p^2) under warm-up + cosine, interrupted after `stop` steps when
// stop > 0: the optimizer's state is saved, a fresh parameter and optimizer (built with the
// same options, as a resumed program would) load it, and the schedule is built before or
// after that load. Returns the final parameter.
std::vector<double> train_with_schedule(int64_t stop, bool scheduler_after_load) {
  const LrSchedule schedule = parse_lr_schedule("warmup:3:0.2+cosine:10:0.1");
  Variable p(Tensor::full({3}, 1.5f), true);
  auto opt = std::make_unique<Adam>(std::vector<Variable>{p}, AdamOptions{.lr = 0.05});
  auto scheduler = std::make_unique<LrScheduler>(std::vector<Optimizer*>{opt.get()}, schedule);
  for (int64_t i = 0; i < 10; ++i) {
    if (i == stop) {
      StateDict saved;
      for (const auto& [name, t] : opt->state_dict()) saved.emplace(name, t.clone());
      Variable resumed(p.data().clone(), true);
      opt = std::make_unique<Adam>(std::vector<Variable>{resumed}, AdamOptions{.lr = 0.05});
      if (!scheduler_after_load)
        scheduler = std::make_unique<LrScheduler>(std::vector<Optimizer*>{opt.get()}, schedule);
      opt->load_state_dict(saved);
      if (scheduler_after_load)
        scheduler = std::make_unique<LrScheduler>(std::vector<Optimizer*>{opt.get()}, schedule);
      p = resumed;
    }
    scheduler->set_iteration(i);
    CHECK(opt->lr() == schedule.lr_at(0.05, i));
    opt->zero_grad();
    sum(p * p).backward();
    opt->step();
  }
  return p.data().to_vector();
}

}  // namespace

TEST_CASE("A run resumed with its schedule built before or after loading equals the uninterrupted one",
          "[lr_scheduler]") {
  const std::vector<double> uninterrupted = train_with_schedule(-1, false);
  CHECK(train_with_schedule(5, false) == uninterrupted);  // bitwise
  CHECK(train_with_schedule(5, true) == uninterrupted);
  CHECK(train_with_schedule(1, true) == uninterrupted);
}

TEST_CASE("LrScheduler takes explicit base rates and restores them from its state_dict", "[lr_scheduler]") {
  Variable p(Tensor::ones({2}), true);
  SGD a(std::vector<Variable>{p}, SGDOptions{.lr = 0.1});
  const LrSchedule schedule = parse_lr_schedule("step:2:0.5");
  LrScheduler explicit_base({&a}, schedule, {0.4});
  CHECK(a.initial_lr() == 0.4);
  explicit_base.set_iteration(3);
  CHECK(a.lr() == 0.4 * 0.5);
  const StateDict saved = explicit_base.state_dict();

  SGD b(std::vector<Variable>{p}, SGDOptions{.lr = 0.1});
  LrScheduler restored({&b}, schedule);
  CHECK(restored.base_lrs() == std::vector<double>{0.1});
  restored.load_state_dict(saved);
  CHECK(restored.base_lrs() == std::vector<double>{0.4});
  CHECK(restored.iteration() == 3);
  CHECK(b.lr() == 0.4 * 0.5);
  CHECK(b.initial_lr() == 0.4);

  CHECK_THROWS_WITH(LrScheduler({&b}, schedule, {0.1, 0.2}),
                    Catch::Contains("2 base rates for 1 optimizers"));
  CHECK_THROWS_WITH(LrScheduler({&b}, schedule, {-1.0}), Catch::Contains("invalid initial learning rate -1"));
  StateDict bad = saved;
  bad.erase("iteration");
  CHECK_THROWS_WITH(restored.load_state_dict(bad), Catch::Contains("no entry 'iteration'"));
  bad = saved;
  bad["base_lr.0"] = Tensor::scalar(0.0, DType::f64);
  CHECK_THROWS_WITH(restored.load_state_dict(bad), Catch::Contains("'base_lr.0' is 0"));
  CHECK(restored.base_lrs() == std::vector<double>{0.4});  // a refused load changes nothing
}
