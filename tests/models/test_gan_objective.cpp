// A GAN's objective: which updates an iteration runs (n_critic, lazy R1), what it logs, and
// the objectives make_gan refuses.
#include <catch2/catch.hpp>
#include <cmath>

#include "autograd/optim.h"
#include "models/gan.h"
#include "models/gradient_penalty.h"
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
// G step, lazy R1's latest penalty, WGAN-GP's terms, R2's.
TEST_CASE("deferred log reads: no host read in the step, the same values read later", "[gan][objective]") {
  for (const GanConfig& config :
       {GanConfig{.model = "ring8-mlp", .objective = {.n_critic = 2, .r1_gamma = 1.0, .r1_every = 3}},
        GanConfig{.model = "ring8-mlp", .objective = {.loss = GanLoss::wgan_gp}},
        GanConfig{.model = "ring8-mlp",
        .objective = {.loss = GanLoss::relativistic, .r1_gamma = 1.0, .r2_gamma = 1.0}}}) {
    auto now = make_gan(config), later = make_gan(config);
    later->defer_log_reads = true;
    WrappedGan wrapped_now(now, nullptr, alone()), wrapped_later(later, nullptr, alone());
    for (int64_t it = 0; it < 7; ++it) {
      INFO("iteration " << it << ", loss " << static_cast<int>(config.objective.loss));
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

// The relativistic pairing loss (RpGAN, R3GAN's) on fixed D outputs, against a direct loop:
// D's loss mean_i softplus(f_i - r_i), G's mean_i softplus(r_i - f_i), pairs by row. The
// values are such that pairing by row matters (a loss on mean(f) - mean(r) differs).
TEST_CASE("rpgan: D's and G's losses pair D(real_i) with D(fake_i), against a direct loop",
          "[gan][objective][rpgan]") {
  auto model = make_gan({.model = "mlp", .objective = {.loss = GanLoss::relativistic}});
  const std::vector<double> r = {0.5, -1.25, 2.0, 0.0, -3.0, 1.5}, f = {-0.75, 0.25, 1.0, 4.0, -2.5, -0.5};
  auto column = [](const std::vector<double>& v) {
    return Variable(Tensor::from_values({static_cast<int64_t>(v.size()), 1}, v, DType::f64),
                    /*requires_grad=*/true);
  };
  auto softplus_ref = [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); };
  double want_d = 0.0;
  for (size_t i = 0; i < r.size(); ++i) want_d += softplus_ref(f[i] - r[i]);
  want_d /= static_cast<double>(r.size());
  Variable d_real = column(r), d_fake = column(f);
  Variable loss_d = model->loss_d(d_real, d_fake);
  CHECK(loss_d.item() == Approx(want_d).epsilon(1e-14));
  // Its gradient: d/df_i = sigmoid(f_i - r_i) / n = -d/dr_i.
  loss_d.backward();
  for (size_t i = 0; i < r.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(r[i] - f[i])) / static_cast<double>(r.size());
    CHECK(d_fake.grad().to_vector()[i] == Approx(s).epsilon(1e-14));
    CHECK(d_real.grad().to_vector()[i] == Approx(-s).epsilon(1e-14));
  }

  // G's loss through D on fixed fakes, with fixed outputs on the reals: D(real) is a constant.
  Generator gen(4);
  Tensor fakes = Tensor::empty({6, 784});
  fill_normal(fakes, 0.0, 1.0, gen);
  const std::vector<double> d_fakes = model->discriminate(Variable(fakes)).data().to_vector();
  Variable d_real_g(Tensor::from_values({6, 1}, r), /*requires_grad=*/true);
  Variable loss_g = model->loss_g(Variable(fakes), d_real_g);
  double want_g = 0.0;
  for (size_t i = 0; i < r.size(); ++i) want_g += softplus_ref(r[i] - d_fakes[i]);
  CHECK(loss_g.item() == Approx(want_g / 6).epsilon(1e-6));
  loss_g.backward();
  CHECK_FALSE(d_real_g.grad().defined());

  // Unpaired outputs, or a G loss without D(real), are named errors.
  CHECK_THROWS_WITH(model->loss_d(column({1.0, 2.0}), column({1.0, 2.0, 3.0})),
                    Catch::Contains("rpgan: D's outputs on the reals [2, 1] and on the fakes [3, 1] do not "
                                    "pair by index"));
  CHECK_THROWS_WITH(model->loss_g(Variable(fakes)),
                    Catch::Contains("the relativistic loss needs D's outputs on the reals"));
  CHECK_THROWS_WITH(model->losses_d(d_real, d_fake), Catch::Contains("its terms do not separate"));
}

// R2 in the D step: r2_gamma / 2 times the mean squared gradient norm of D on the detached
// fakes, logged as r2 (the value before D's update: the same as a direct computation with
// the initial weights), alongside R1 on the reals.
TEST_CASE("rpgan with R1 and R2: r2 is the zero-centred penalty on this step's fakes",
          "[gan][objective][rpgan]") {
  const GanConfig config{.model = "ring8-mlp",
                         .objective = {.loss = GanLoss::relativistic, .r1_gamma = 1.0, .r2_gamma = 1.0}};
  auto model = make_gan(config), fresh = make_gan(config);
  const Batch batch = ring8_batch(3);
  Variable fakes(fresh->generate(Variable(batch.targets)).data(), /*requires_grad=*/true);
  Variable reals(batch.inputs, /*requires_grad=*/true);
  const double want_r2 = r1_penalty(fresh->discriminate(fakes), fakes).item();
  const double want_r1 = r1_penalty(fresh->discriminate(reals), reals).item();
  const double want_loss_d =
      fresh->loss_d(fresh->discriminate(Variable(batch.inputs)), fresh->discriminate(fakes.detach())).item();
  WrappedGan wrapped(model, nullptr, alone());
  const LogVars log = wrapped.train_step(batch);
  REQUIRE(log.count("r2") == 1);
  REQUIRE(log.count("r1") == 1);
  CHECK(log.at("r2") == Approx(want_r2).epsilon(1e-6));
  CHECK(log.at("r1") == Approx(want_r1).epsilon(1e-6));
  CHECK(log.at("loss_d") == Approx(want_loss_d).epsilon(1e-6));
  CHECK(want_r2 != Approx(want_r1).epsilon(1e-3));  // the two penalties see different samples
  CHECK(log.count("gp") == 0);
  // Off: no r2 in the log.
  auto plain = make_gan({.model = "ring8-mlp", .objective = {.loss = GanLoss::relativistic}});
  WrappedGan wrapped_plain(plain, nullptr, alone());
  CHECK(wrapped_plain.train_step(batch).count("r2") == 0);
  CHECK_THROWS_WITH(make_gan({.model = "mlp", .objective = {.r2_gamma = -1.0}}),
                    Catch::Contains("r2_gamma must be a finite number >= 0 (0: off), got -1"));
  CHECK_THROWS_WITH(make_gan({.model = "dcgan64", .objective = {.r2_gamma = 1.0}}),
                    Catch::Contains("--r2-gamma: the critic (discriminator) of 'dcgan64' has batch norm"));
}

// GanObjective::scale_penalties: the penalties' inner gradient under D's loss scale. A scale
// of 2^40 is infinite in float16, so under fp16 the scaled inner gradient overflows where
// the unscaled one (the default) stays finite; in float32 the two are bit for bit the same
// penalty and the same D update (gradient_penalty.h).
TEST_CASE("penalties under D's loss scale: scaled inner gradients overflow in fp16, change nothing in fp32",
          "[gan][objective][precision]") {
  const GanObjective objectives[] = {{.r1_gamma = 1.0},
                                     {.r1_gamma = 1.0, .r1_every = 2},
                                     {.r2_gamma = 1.0},
                                     {.loss = GanLoss::wgan_gp, .n_critic = 1}};
  const char* names[] = {"R1", "lazy R1", "R2", "WGAN-GP"};
  for (size_t k = 0; k < std::size(objectives); ++k) {
    INFO(names[k]);
    const char* logged = k == 2 ? "r2" : k == 3 ? "gp" : "r1";
    for (DType precision : {DType::f16, DType::f32}) {
      INFO(dtype_name(precision));
      LogVars logs[2];
      std::vector<Tensor> d_params[2];
      for (int scaled = 0; scaled < 2; ++scaled) {
        GanConfig config{.model = "ring8-mlp", .objective = objectives[k], .precision = precision};
        config.objective.scale_penalties = scaled == 1;
        auto model = make_gan(config);
        WrappedGanOptions options = alone();
        options.loss_scaling = true;
        options.loss_scale_init = precision == DType::f16 ? std::ldexp(1.0, 40) : std::ldexp(1.0, 20);
        WrappedGan wrapped(model, nullptr, options);
        logs[scaled] = wrapped.train_step(ring8_batch(3));
        for (const auto& [name, p] : model->discriminator->named_parameters())
          d_params[scaled].push_back(p.data().clone());
      }
      REQUIRE(logs[0].count(logged) == 1);
      CHECK(std::isfinite(logs[0].at(logged)));
      if (precision == DType::f16) {
        CHECK_FALSE(std::isfinite(logs[1].at(logged)));
      } else {
        CHECK(logs[1].at(logged) == logs[0].at(logged));
        for (size_t p = 0; p < d_params[0].size(); ++p) {
          INFO("D parameter " << p);
          CHECK(d_params[0][p].to_vector() == d_params[1][p].to_vector());
        }
      }
    }
  }
}
