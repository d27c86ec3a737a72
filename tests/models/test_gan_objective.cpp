// A GAN's objective: which updates an iteration runs (n_critic, lazy R1), what it logs, and
// the objectives make_gan refuses.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/optim.h"
#include "models/gan.h"
#include "models/wrapped_gan.h"
#include "runtime/host_cost.h"
#include "runtime/rng.h"

using namespace tandem;
using namespace tandem::models;

namespace {

Batch ring8_batch(uint64_t seed) {
  Generator gen(seed);
  Batch b{Tensor::empty({8, 2}), Tensor::empty({8, 16}), Tensor::empty({8})};
  fill_normal(b.inputs, 0.0, 1.0, gen);
  fill_normal(b.targets, 0.0, 1.0, gen);
  fill_uniform(b.aux, 0.0, 1.0, gen);
  return b;
}

// One process, no communication.
WrappedGanOptions alone() {
  WrappedGanOptions options;
  options.wrap = WrapMode::none;
  return options;
}

}  // namespace

TEST_CASE("an iteration is one D update, with a G update every n_critic and a lazy R1 update every r1_every",
          "[gan][objective]") {
  GanConfig config{.model = "ring8-mlp", .objective = {.n_critic = 3, .r1_gamma = 1.0, .r1_every = 2}};
  auto model = make_gan(config);
  WrappedGan wrapped(model, nullptr, alone());
  // Optimizer steps per iteration: D, + R1 at even iterations, + G at iterations 2 and 5.
  std::vector<int64_t> steps;
  std::vector<double> loss_g;
  for (int64_t it = 0; it < 6; ++it) {
    model->set_iteration(it);
    const int64_t before = optim::steps_taken_on_this_thread();
    LogVars log = wrapped.train_step(ring8_batch(static_cast<uint64_t>(it)));
    steps.push_back(optim::steps_taken_on_this_thread() - before);
    CHECK(log.count("r1") == 1);
    CHECK(log.count("gp") == 0);
    loss_g.push_back(log.at("loss_g"));
  }
  CHECK(steps == std::vector<int64_t>{2, 1, 3, 1, 2, 2});
  CHECK(loss_g[0] == 0.0);  // no G step yet
  CHECK(loss_g[1] == 0.0);
  CHECK(loss_g[2] != 0.0);
  CHECK(loss_g[3] == loss_g[2]);  // the latest G step's
}

TEST_CASE("wgan-gp logs its penalty and the critic's Wasserstein estimate", "[gan][objective]") {
  auto model = make_gan({.model = "ring8-mlp", .objective = {.loss = GanLoss::wgan_gp}});
  WrappedGan wrapped(model, nullptr, alone());
  LogVars log = wrapped.train_step(ring8_batch(1));
  REQUIRE(log.count("gp") == 1);
  CHECK(log.at("gp") > 0.0);
  CHECK(log.at("wdist") == -log.at("loss_d"));
  CHECK(log.count("r1") == 0);
  Batch no_mix = ring8_batch(2);
  no_mix.aux = Tensor();
  CHECK_THROWS_WITH(wrapped.train_step(no_mix),
                    Catch::Contains("wgan-gp: the batch carries no interpolation"));
}

// defer_log_reads (tandem-train's loop): a step reads nothing on the host (on a GPU each read
// waits for the device), its log holds NaN placeholders, and read_device_log fills them with
// the values a step that read them at once logs: the latest G loss on iterations without a
// G step, lazy R1's latest penalty, WGAN-GP's terms.
TEST_CASE("deferred log reads: no host read in the step, the same values read later", "[gan][objective]") {
  for (const GanConfig& config :
       {GanConfig{.model = "ring8-mlp", .objective = {.n_critic = 2, .r1_gamma = 1.0, .r1_every = 3}},
        GanConfig{.model = "ring8-mlp", .objective = {.loss = GanLoss::wgan_gp}}}) {
    auto now = make_gan(config), later = make_gan(config);
    later->defer_log_reads = true;
    WrappedGan wrapped_now(now, nullptr, alone()), wrapped_later(later, nullptr, alone());
    for (int64_t it = 0; it < 7; ++it) {
      INFO("iteration " << it << ", loss "
                        << (config.objective.loss == GanLoss::wgan_gp ? "wgan-gp" : "bce"));
      now->set_iteration(it);
      later->set_iteration(it);
      const LogVars want = wrapped_now.train_step(ring8_batch(static_cast<uint64_t>(it)));
      host_cost::start();
      const LogVars deferred = wrapped_later.train_step(ring8_batch(static_cast<uint64_t>(it)));
      const host_cost::Record reads = host_cost::stop();
      INFO(host_cost::per_step_table(reads, 1, ""));
      CHECK(reads.host_reads == 0);
      CHECK(std::isnan(deferred.at("loss_d")));
      const LogVars got = later->read_device_log(deferred);
      REQUIRE(got.size() == want.size());
      for (const auto& [name, value] : want) {
        INFO(name);
        CHECK(got.at(name) == value);  // bitwise: the same tensors, read later
      }
    }
  }
}

TEST_CASE("make_gan refuses an objective out of range, naming the setting", "[gan][objective][errors]") {
  CHECK_THROWS_WITH(make_gan({.model = "mlp", .objective = {.n_critic = 0}}),
                    Catch::Contains("n_critic (D steps per G step) must be at least 1, got 0"));
  CHECK_THROWS_WITH(make_gan({.model = "mlp", .objective = {.r1_gamma = 1.0, .r1_every = 0}}),
                    Catch::Contains("r1_every (D steps per R1 step) must be at least 1, got 0"));
  CHECK_THROWS_WITH(make_gan({.model = "mlp", .objective = {.r1_gamma = -1.0}}),
                    Catch::Contains("r1_gamma must be a finite number >= 0 (0: off), got -1"));
  CHECK_THROWS_WITH(make_gan({.model = "mlp", .objective = {.loss = GanLoss::wgan_gp, .gp_lambda = 0.0}}),
                    Catch::Contains("gp_lambda must be a positive finite number, got 0"));
  // Only dcgan64's critic has batch norm (dcgan's is in G): the others take the penalties.
  for (const std::string& name : gan_model_names()) {
    INFO(name);
    if (name == "dcgan64") {
      CHECK_THROWS_WITH(make_gan({.model = name, .objective = {.loss = GanLoss::wgan_gp}}),
                        Catch::Contains("dcgan64"));
      continue;
    }
    CHECK_NOTHROW(make_gan({.model = name, .objective = {.loss = GanLoss::wgan_gp, .r1_gamma = 10.0}}));
  }
}
