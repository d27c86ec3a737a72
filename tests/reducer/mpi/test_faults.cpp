// Faults the wrappers must catch: a NaN/Inf that reaches an averaged gradient (skip the
// step on every rank, or stop naming the parameters) and replicas that drift apart (a
// hash check names the first differing parameter). Run at 2 ranks: the bad value lives
// on rank 1 only, so rank 0 must reach the same verdict through the averages.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"

using namespace tandem;

namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group();
  return group;
}

class Regressor : public DataParallelModel {
 public:
  Regressor() {
    Generator gen(4);
    body = register_module("body", std::make_shared<nn::Linear>(3, 4, true, gen));
    head = register_module("head", std::make_shared<nn::Linear>(4, 1, true, gen));
  }
  Losses forward_losses(const Batch& batch) override {
    Variable y = head->forward(relu(body->forward(Variable(batch.inputs))));
    return {{"loss_mse", mean(square(y - Variable(batch.targets)))}};
  }
  std::shared_ptr<nn::Linear> body, head;
};

// Rank 1's first input row is NaN when `poison`; everything else is finite.
Batch batch_for(bool poison) {
  Batch b;
  b.inputs = Tensor::from_values({2, 3}, {0.5, -1.0, 2.0, 1.5, 0.25, -0.75});
  b.targets = Tensor::from_values({2, 1}, {1.0, -1.0});
  if (poison && world()->rank() == 1) b.inputs.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  return b;
}

std::vector<std::vector<double>> values(const nn::Module& m) {
  std::vector<std::vector<double>> out;
  for (const Variable& p : m.parameters()) out.push_back(p.data().to_vector());
  return out;
}

}  // namespace

TEST_CASE("non-finite stop: every rank throws naming the parameters", "[faults][nonfinite]") {
  auto model = std::make_shared<Regressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DdpOptions options;
  options.reducer.non_finite = NonFinitePolicy::stop;
  DistributedDataParallel ddp(model, world(), options);
  ddp.train_step(batch_for(false), wrapper);  // a finite step passes
  if (world()->size() < 2) return;
  try {
    ddp.train_step(batch_for(true), wrapper);
    FAIL("a NaN gradient was averaged without an error on rank " << world()->rank());
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("non-finite (NaN or Inf) averaged gradient") != std::string::npos);
    CHECK(m.find("'body.weight'") != std::string::npos);
    CHECK(m.find("every rank stops") != std::string::npos);
  }
}

TEST_CASE("non-finite skip: every rank skips the step and carries on", "[faults][nonfinite]") {
  auto model = std::make_shared<Regressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DdpOptions options;
  options.reducer.non_finite = NonFinitePolicy::skip_step;
  DistributedDataParallel ddp(model, world(), options);
  ddp.train_step(batch_for(false), wrapper);
  auto before = values(*model);
  ddp.train_step(batch_for(true), wrapper);
  if (world()->size() >= 2) {
    CHECK(wrapper.skipped_steps() == 1);
    CHECK(values(*model) == before);  // untouched, on both ranks
    for (const Variable& p : model->parameters())
      CHECK_FALSE(p.grad().defined());  // zeroed for the next step
  }
  ddp.train_step(batch_for(false), wrapper);  // the next finite step updates again
  CHECK(values(*model) != before);
  for (const auto& v : values(*model)) {
    for (double x : v) CHECK(std::isfinite(x));
  }
}

TEST_CASE("non-finite off: nothing is checked and the NaN goes through", "[faults][nonfinite]") {
  auto model = std::make_shared<Regressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DistributedDataParallel ddp(model, world());
  ddp.train_step(batch_for(true), wrapper);
  if (world()->size() < 2) return;
  CHECK(wrapper.skipped_steps() == 0);
  CHECK(std::isnan(model->body->weight.data().at(0)));
}

TEST_CASE("replica check: a parameter changed on one rank is named on every rank", "[faults][replicas]") {
  auto model = std::make_shared<Regressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DdpOptions options;
  options.check_replicas_every = 2;
  DistributedDataParallel ddp(model, world(), options);
  ddp.train_step(batch_for(false), wrapper);
  ddp.train_step(batch_for(false), wrapper);  // checked: identical
  if (world()->size() < 2) return;
  if (world()->rank() == 1) {
    float* w = model->head->bias.data().data<float>();
    w[0] = std::nextafter(w[0], 1e30f);  // one ulp
  }
  ddp.train_step(batch_for(false), wrapper);  // step 3: not checked
  try {
    ddp.train_step(batch_for(false), wrapper);
    FAIL("drifted replicas passed the check on rank " << world()->rank());
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("replicas differ after train_step 4") != std::string::npos);
    CHECK(m.find("'head.bias'") != std::string::npos);
  }
}
