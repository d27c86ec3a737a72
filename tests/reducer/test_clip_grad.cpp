// Gradient clipping (autograd/clip_grad.h, OptimWrapper's ClipGrad): norms and scaled
// gradients against hand-computed values, norm type infinity, a max_norm above the norm
// leaving gradients untouched bit for bit, and at 2 thread ranks a clipped data-parallel
// step whose norm and parameters are bitwise equal on both ranks and that issues no
// collective beyond the unclipped step's (counted on the process group).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/clip_grad.h"
#include "autograd/observer_scope.h"
#include "reducer/ddp.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Variable param_with_grad(const std::vector<double>& grad) {
  const Shape shape = {static_cast<int64_t>(grad.size())};
  Variable p(Tensor::ones(shape), /*requires_grad=*/true);
  p.set_grad(Tensor::from_values(shape, grad));
  return p;
}

// Every operation forwarded to `inner`, counted.
class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(std::shared_ptr<dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->name()), inner_(std::move(inner)) {}
  dist::Backend backend() const override { return inner_->backend(); }
  Device tensor_device() const override { return inner_->tensor_device(); }
  std::shared_ptr<dist::Work> allreduce(Tensor& t, dist::ReduceOp op, const std::string& tag) override {
    ++calls;
    return inner_->allreduce(t, op, tag);
  }
  std::shared_ptr<dist::Work> broadcast(Tensor& t, int root, const std::string& tag) override {
    ++calls;
    return inner_->broadcast(t, root, tag);
  }
  std::shared_ptr<dist::Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                        const std::string& tag) override {
    ++calls;
    return inner_->allgather(out, in, tag);
  }
  std::shared_ptr<dist::Work> allgather_flat(Tensor& out, const Tensor& in, const std::string& tag) override {
    ++calls;
    return inner_->allgather_flat(out, in, tag);
  }
  std::shared_ptr<dist::Work> barrier(const std::string& tag) override {
    ++calls;
    return inner_->barrier(tag);
  }
  std::shared_ptr<dist::ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    ++calls;
    return inner_->new_subgroup(ranks);
  }
  int64_t calls = 0;

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
};

struct RankResult {
  double norm = 0.0;
  int64_t collectives = 0;
  std::vector<Tensor> params;
};

// Two updates of a tiny GAN's D at `group`'s rank on its own rows, clipped at max_norm
// (0: off); the collectives counted from after wrapping.
RankResult clipped_d_steps(const std::shared_ptr<dist::ProcessGroup>& inner, double max_norm,
                           double norm_type) {
  ThreadObserverScope scope;
  auto group = std::make_shared<CountingGroup>(inner);
  auto gan = std::make_shared<TinyGan>(/*seed=*/7, /*dynamic=*/false);
  DistributedDataParallel ddp(gan, group);
  OptimWrapper wrapper(
      std::make_shared<optim::SGD>(gan->discriminator->parameters(), optim::SGDOptions{.lr = 0.5}), 1,
      {.max_norm = max_norm, .norm_type = norm_type});
  wrapper.attach(&ddp.reducer());
  group->calls = 0;
  for (int it = 0; it < 2; ++it) {
    Tensor real = slice_rows(random_tensor({kGlobalBatch, 3}, 1000 + it), group->rank(), group->size());
    Variable loss = mean(softplus(-gan->discriminator->run(Variable(real), false)));
    wrapper.zero_grad();
    wrapper.update_params(loss * 50.0);  // large gradients: the clip applies
  }
  RankResult out;
  out.norm = wrapper.last_grad_norm().value_or(-1.0);
  out.collectives = group->calls;
  out.params = parameter_values(*gan->discriminator);
  return out;
}

}  // namespace

TEST_CASE("clip_grad_norm_: norm 2 against a hand-computed reference", "[clip_grad]") {
  std::vector<Variable> params = {param_with_grad({3, 4}), param_with_grad({0, 12})};
  Variable no_grad(Tensor::ones({1}), true);
  params.push_back(no_grad);  // skipped
  // sqrt(9 + 16 + 144) = 13; clipped to 6.5: every gradient times 6.5 / (13 + 1e-6).
  CHECK(grad_norm(params, 2) == 13.0);
  const double norm = clip_grad_norm_(params, 6.5, 2);
  CHECK(norm == 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  CHECK(params[0].grad().to_vector()[0] == Approx(3 * coef).epsilon(1e-7));
  CHECK(params[0].grad().to_vector()[1] == Approx(4 * coef).epsilon(1e-7));
  CHECK(params[1].grad().to_vector()[1] == Approx(12 * coef).epsilon(1e-7));
  CHECK(grad_norm(params, 2) == Approx(6.5).epsilon(1e-6));
  CHECK_FALSE(params[2].grad().defined());
}

TEST_CASE("clip_grad_norm_: norm type infinity is the largest magnitude", "[clip_grad]") {
  std::vector<Variable> params = {param_with_grad({3, -4}), param_with_grad({0, -12, 5})};
  CHECK(clip_grad_norm_(params, 6.0, kInf) == 12.0);
  const double coef = 6.0 / (12.0 + 1e-6);
  CHECK(params[0].grad().to_vector()[1] == Approx(-4 * coef).epsilon(1e-7));
  CHECK(params[1].grad().to_vector()[1] == Approx(-12 * coef).epsilon(1e-7));
  CHECK(grad_norm(params, kInf) == Approx(6.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm_: a max_norm above the norm leaves the gradients untouched", "[clip_grad]") {
  std::vector<Variable> params = {param_with_grad({0.1, -0.3}), param_with_grad({0.7})};
  std::vector<Tensor> before;
  for (const Variable& p : params) before.push_back(p.grad().clone());
  for (double norm_type : {2.0, kInf}) {
    clip_grad_norm_(params, 100.0, norm_type);
    require_bitwise_equal({params[0].grad(), params[1].grad()}, before);
  }
}

TEST_CASE("clip_grad_norm_ and OptimWrapper: bad values are named", "[clip_grad]") {
  std::vector<Variable> params = {param_with_grad({1})};
  CHECK_THROWS_WITH(clip_grad_norm_(params, 1.0, 1.0),
                    Catch::Contains("norm_type must be 2 or infinity, got 1"));
  CHECK_THROWS_WITH(clip_grad_norm_(params, -1.0, 2.0), Catch::Contains("max_norm must be a positive"));
  auto sgd = std::make_shared<optim::SGD>(params);
  CHECK_THROWS_WITH(OptimWrapper(sgd, 1, {.max_norm = -2}), Catch::Contains("clip_grad.max_norm"));
  CHECK_THROWS_WITH(OptimWrapper(sgd, 1, {.max_norm = 1, .norm_type = 3}),
                    Catch::Contains("clip_grad.norm_type"));
}

TEST_CASE("OptimWrapper clip_grad: the step uses the clipped gradients; the norm before clipping is kept",
          "[clip_grad]") {
  std::vector<Variable> params = {param_with_grad({3, 4})};
  OptimWrapper wrapper(std::make_shared<optim::SGD>(params, optim::SGDOptions{.lr = 1.0}), 1,
                       {.max_norm = 1.0});
  CHECK_FALSE(wrapper.last_grad_norm().has_value());
  wrapper.step();
  REQUIRE(wrapper.last_grad_norm().has_value());
  CHECK(*wrapper.last_grad_norm() == 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(params[0].data().to_vector()[0] == Approx(1.0 - 3 * coef).epsilon(1e-7));
  CHECK(params[0].data().to_vector()[1] == Approx(1.0 - 4 * coef).epsilon(1e-7));
}

TEST_CASE(
    "threads: clipping the averaged gradients gives bitwise-equal norms and parameters on both ranks, "
    "with no extra collective",
    "[clip_grad][threads]") {
  for (double norm_type : {2.0, kInf}) {
    INFO("norm type " << norm_type);
    std::vector<RankResult> clipped(2), plain(2);
    dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> g) {
      clipped[static_cast<size_t>(g->rank())] = clipped_d_steps(g, 0.05, norm_type);
    });
    dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> g) {
      plain[static_cast<size_t>(g->rank())] = clipped_d_steps(g, 0.0, norm_type);
    });
    CHECK(clipped[0].norm > 0.05);  // the clip applied
    CHECK(std::memcmp(&clipped[0].norm, &clipped[1].norm, sizeof(double)) == 0);
    require_bitwise_equal(clipped[1].params, clipped[0].params);
    CHECK(plain[0].collectives > 0);  // the counter sees the Reducer's collectives
    CHECK(clipped[0].collectives == plain[0].collectives);
    CHECK(clipped[1].collectives == plain[1].collectives);
    // Clipping changed the update.
    bool differs = false;
    for (size_t i = 0; i < plain[0].params.size(); ++i)
      differs = differs || plain[0].params[i].to_vector() != clipped[0].params[i].to_vector();
    CHECK(differs);
  }
}
