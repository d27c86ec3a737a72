// Faults the wrappers must catch: a NaN/Inf that reaches an averaged gradient (skip the
// step on every rank, stop naming the parameters, or scrub it alike on every rank) and replicas that drift
// apart (a hash check names the first differing parameter, or a buffer that the broadcast does not reach;
// batch-norm statistics that differ between broadcasts by design are not a fault). Run at 2 ranks: the bad
// value lives on rank 1 only, so rank 0 must reach the same verdict through the averages.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "autograd/loss_scaler.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_world.h"

using namespace tandem;
using tandem::testing::world;

namespace {

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

// The regressor with batch norm between its layers: running statistics that each rank's
// forward updates from its own data.
class NormedRegressor : public DataParallelModel {
 public:
  NormedRegressor() {
    Generator gen(6);
    body = register_module("body", std::make_shared<nn::Linear>(3, 4, true, gen));
    norm = register_module("norm", std::make_shared<nn::BatchNorm1d>(4));
    head = register_module("head", std::make_shared<nn::Linear>(4, 1, true, gen));
  }
  Losses forward_losses(const Batch& batch) override {
    Variable y = head->forward(relu(norm->forward(body->forward(Variable(batch.inputs)))));
    return {{"loss_mse", mean(square(y - Variable(batch.targets)))}};
  }
  std::shared_ptr<nn::Linear> body, head;
  std::shared_ptr<nn::BatchNorm1d> norm;
};

// Rank r's inputs are scaled by r + 1 and shifted by step: the ranks' statistics differ.
Batch rank_batch(int step) {
  const double s = world()->rank() + 1.0;
  Batch b;
  b.inputs =
      Tensor::from_values({3, 3}, {0.5 * s, -1.0, 2.0 + step, 1.5, 0.25 * s, -0.75, -s, 0.5 * step, 1.0});
  b.targets = Tensor::from_values({3, 1}, {1.0, -1.0, 0.5});
  return b;
}

// True on every rank when every rank holds rank 0's values of `t`.
bool same_on_all_ranks(const Tensor& t) {
  Tensor rank0 = t.clone();
  world()->broadcast(rank0, 0, "rank 0's copy")->wait();
  Tensor differing = Tensor::full({1}, rank0.to_vector() == t.to_vector() ? 0.0 : 1.0);
  dist::allreduce_host(*world(), differing, dist::ReduceOp::sum, "ranks differing from rank 0");
  return differing.at(0) == 0.0;
}

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

TEST_CASE("loss scaler: an overflow on one rank skips the step and backs the scale off on every rank",
          "[faults][nonfinite][loss_scaler]") {
  // The Reducer checks nothing (non_finite off): the scaler alone decides, on the averages.
  auto model = std::make_shared<Regressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  auto scaler =
      std::make_shared<optim::LossScaler>(optim::LossScalerOptions{.init_scale = 1024, .growth_interval = 2});
  wrapper.set_loss_scaler(scaler);
  DistributedDataParallel ddp(model, world());
  // A twin without a scaler on the same batches: a power-of-two scale and its inverse are
  // exact in float32, so the steps it takes are bitwise the twin's.
  auto twin = std::make_shared<Regressor>();
  OptimWrapper twin_wrapper(std::make_shared<optim::SGD>(twin->parameters(), optim::SGDOptions{.lr = 0.1}));
  DistributedDataParallel twin_ddp(twin, world());
  ddp.train_step(batch_for(false), wrapper);
  twin_ddp.train_step(batch_for(false), twin_wrapper);
  CHECK(values(*model) == values(*twin));
  CHECK(scaler->growth_tracker() == 1);
  const auto before = values(*model);
  ddp.train_step(batch_for(true), wrapper);  // rank 1's NaN reaches the averages
  if (world()->size() >= 2) {
    CHECK(wrapper.skipped_steps() == 1);
    CHECK(scaler->skipped_steps() == 1);
    CHECK(scaler->scale() == 512.0);
    CHECK(scaler->growth_tracker() == 0);
    CHECK(values(*model) == before);  // untouched, on both ranks
  }
  CHECK(same_on_all_ranks(Tensor::from_values({2}, {scaler->scale(), double(wrapper.skipped_steps())})));
  ddp.train_step(batch_for(false), wrapper);
  twin_ddp.train_step(batch_for(false), twin_wrapper);
  ddp.train_step(batch_for(false), wrapper);  // two clean steps: the scale grows back
  twin_ddp.train_step(batch_for(false), twin_wrapper);
  CHECK(scaler->scale() == (world()->size() >= 2 ? 1024.0 : 4096.0));
  if (world()->size() >= 2) CHECK(values(*model) == values(*twin));  // the skipped step aside, the same steps
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

namespace {

// loss = sum(a * x) + sum(b * y) for the batch's x (8 values) and y (2): each rank's
// gradients are its own inputs, so NaN and Inf can be planted exactly where wanted.
class Planted : public DataParallelModel {
 public:
  Planted() {
    a = register_parameter("a", Variable(Tensor::zeros({8}), true));
    b = register_parameter("b", Variable(Tensor::zeros({2}), true));
  }
  Losses forward_losses(const Batch& batch) override {
    return {{"loss", add(sum(mul(a, Variable(batch.inputs))), sum(mul(b, Variable(batch.targets))))}};
  }
  Variable a, b;
};

}  // namespace

TEST_CASE("non-finite scrub: every rank holds the same scrubbed averages, counted per parameter",
          "[faults][nonfinite][scrub]") {
  if (world()->size() != 2) return;  // the planted values and their averages are for 2 ranks
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Element by element, rank 0's and rank 1's gradient of a, their average, and its scrub:
  //   1, 3 -> 2; NaN, 1 -> NaN -> 0; 2, Inf -> Inf -> 1e5; Inf, -Inf -> NaN -> 0;
  //   3, -Inf -> -Inf -> -1e5; -Inf, -Inf -> -Inf -> -1e5; 4, 5 -> 4.5; 5, 8 -> 6.5
  const std::vector<double> a_grad[2] = {{1, nan, 2, inf, 3, -inf, 4, 5},
                                         {3, 1, inf, -inf, -inf, -inf, 5, 8}};
  const std::vector<double> a_scrubbed = {2, 0, 1e5, 0, -1e5, -1e5, 4.5, 6.5};
  auto model = std::make_shared<Planted>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 1e-6}));
  DdpOptions options;
  options.reducer.non_finite = NonFinitePolicy::scrub;
  DistributedDataParallel ddp(model, world(), options);
  const int rank = world()->rank();
  Batch batch;
  batch.inputs = Tensor::from_values({8}, a_grad[rank]);
  batch.targets = Tensor::from_values({2}, {1.0, 2.0});
  // The backward alone (a step would clear the gradients): the averages as synced.
  model->forward_losses(batch).front().second.backward();
  CHECK(model->a.grad().to_vector() == a_scrubbed);
  CHECK(model->b.grad().to_vector() == std::vector<double>{1.0, 2.0});
  CHECK(same_on_all_ranks(model->a.grad()));
  const std::vector<std::string> names = ddp.reducer().names();
  const std::vector<int64_t> counts = ddp.reducer().scrubbed_elements();
  REQUIRE(counts.size() == 2);
  for (size_t i = 0; i < names.size(); ++i) CHECK(counts[i] == (names[i] == "a" ? 5 : 0));

  // Training goes on: a step is taken (not skipped) with the scrubbed gradients, and the next
  // one, with an Inf in b on rank 1 alone, adds to b's count.
  model->a.set_grad(Tensor());
  model->b.set_grad(Tensor());
  const std::vector<double> a_before = model->a.data().to_vector();
  ddp.train_step(batch, wrapper);
  CHECK(wrapper.skipped_steps() == 0);
  CHECK(model->a.data().to_vector() != a_before);
  for (double x : model->a.data().to_vector()) CHECK(std::isfinite(x));
  if (rank == 1) batch.targets = Tensor::from_values({2}, {-inf, 2.0});
  ddp.train_step(batch, wrapper);
  const std::vector<int64_t> later = ddp.reducer().scrubbed_elements();
  for (size_t i = 0; i < names.size(); ++i)
    CHECK(later[i] == (names[i] == "a" ? 15 : 1));  // a: 5 more at each step
  CHECK(same_on_all_ranks(model->a.data()));
  CHECK(same_on_all_ranks(model->b.data()));
  // b[0]: -1e-6 * 1 at the first step, then -1e-6 * -1e5 (rank 1's -Inf averaged, scrubbed).
  CHECK(model->b.data().to_vector()[0] == Approx(0.1 - 1e-6));
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

TEST_CASE("replica check on a batch-norm model: parameters always, running statistics after their broadcast",
          "[faults][replicas][buffers]") {
  auto model = std::make_shared<NormedRegressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DdpOptions options;
  options.check_replicas_every = 1;
  DistributedDataParallel ddp(model, world(), options);
  for (int step = 0; step < 3; ++step) ddp.train_step(rank_batch(step), wrapper);  // every check passes
  CHECK(same_on_all_ranks(model->norm->running_mean));  // the check broadcast them before comparing

  // Without broadcast_buffers each rank keeps its own statistics: they differ, and are not compared.
  auto own = std::make_shared<NormedRegressor>();
  OptimWrapper own_wrapper(std::make_shared<optim::SGD>(own->parameters(), optim::SGDOptions{.lr = 0.1}));
  options.broadcast_buffers = false;
  DistributedDataParallel own_ddp(own, world(), options);
  for (int step = 0; step < 2; ++step) own_ddp.train_step(rank_batch(step), own_wrapper);
  if (world()->size() > 1) CHECK_FALSE(same_on_all_ranks(own->norm->running_mean));
}

TEST_CASE("replica check: a buffer that the broadcast does not reach is named",
          "[faults][replicas][buffers]") {
  auto model = std::make_shared<NormedRegressor>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1}));
  DdpOptions options;
  options.check_replicas_every = 2;
  DistributedDataParallel ddp(model, world(), options);
  ddp.train_step(rank_batch(0), wrapper);
  if (world()->size() < 2) return;
  // Rank 1 replaces the tensor behind the buffer: the wrapper's broadcast writes the old one.
  if (world()->rank() == 1) model->norm->running_var = Tensor::full({4}, 3.0);
  try {
    ddp.train_step(rank_batch(1), wrapper);
    FAIL("a buffer outside the broadcast passed the check on rank " << world()->rank());
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("replicas differ after train_step 2: 'norm.running_var'") != std::string::npos);
  }
}

TEST_CASE("plain loop: sync_buffers before the forward, check_replicas after the step",
          "[faults][replicas][buffers]") {
  // The README's loop: the model's parts called directly, backward() and the optimizer by hand.
  auto model = std::make_shared<NormedRegressor>();
  optim::SGD opt(model->parameters(), {.lr = 0.1});
  DistributedDataParallel ddp(model, world());
  for (int step = 0; step < 3; ++step) {
    ddp.sync_buffers();
    CHECK(same_on_all_ranks(model->norm->running_mean));
    Variable loss = parse_losses(model->forward_losses(rank_batch(step))).first;
    opt.zero_grad();
    loss.backward();
    opt.step();
    ddp.check_replicas();  // parameters, and the statistics once broadcast: all agree
  }
  if (world()->size() < 2) return;
  if (world()->rank() == 1) {
    float* b = model->head->bias.data().data<float>();
    b[0] = std::nextafter(b[0], 1e30f);  // one ulp
  }
  try {
    ddp.check_replicas("after step 3");
    FAIL("drifted replicas passed the plain loop's check on rank " << world()->rank());
  } catch (const Error& e) {
    std::string m = e.what();
    INFO(m);
    CHECK(m.find("replicas differ after step 3: 'head.bias'") != std::string::npos);
  }
}
