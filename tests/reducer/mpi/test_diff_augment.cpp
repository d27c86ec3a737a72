// DiffAugment through the Reducer at 1-4 ranks: the mlp GAN trained by GanModel::train_step
// with every augmentation group on (p = 1, and p = 0.5 so that the per-sample gates count),
// with the plain loss, WGAN-GP (5 critic steps per G step), R1 in every D step, lazy R1,
// and R3GAN's objective (the relativistic pairing loss with R1 and R2).
// N ranks on slices of the global batch, each augmenting its own rows with its rows of the
// global draw, must end with the parameters of one process on the whole batch (relative
// 1e-5, SGD) and with bitwise identical replicas.
#include <catch2/catch.hpp>
#include <memory>

#include "models/diff_augment.h"
#include "models/gan.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_world.h"
#include "tests/reducer/gan_fixture.h"
#include "tests/reducer/gan_sgd.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

struct Case {
  const char* name;
  models::GanObjective objective;
  int iterations;
  double p;
};

const Case kCases[] = {
    {"non-saturating, p = 1", {}, 4, 1.0},
    {"non-saturating, p = 0.5", {}, 4, 0.5},
    {"wgan-gp, 5 critic steps",
     {.loss = models::GanLoss::wgan_gp, .gp_lambda = 10.0, .n_critic = 5},
     10,
     1.0},
    {"non-saturating + R1 every D step", {.r1_gamma = 10.0}, 4, 1.0},
    {"non-saturating + lazy R1 every 4th D step", {.r1_gamma = 10.0, .r1_every = 4}, 5, 0.5},
    {"rpgan + R1 + R2 (R3GAN; G's step augments its reals too)",
     {.loss = models::GanLoss::relativistic, .r1_gamma = 10.0, .r2_gamma = 10.0},
     4,
     0.5},
};

// Trains the augmented mlp GAN on this rank's slice (distributed) or, as one process, on
// the whole global batch; returns the parameters.
std::vector<Tensor> train_augmented(const Case& c, bool distributed) {
  auto gan = models::make_gan({.model = "mlp", .objective = c.objective, .seed = 3});
  OptimWrapperDict wrappers = sgd_wrappers(*gan);
  const int rank = distributed ? world()->rank() : 0, size = distributed ? world()->size() : 1;
  gan->augment = std::make_shared<models::DiffAugment>(
      models::parse_augment_policy("color,translation,cutout"), /*seed=*/11, rank, size);
  gan->augment->set_p(c.p);
  std::unique_ptr<DistributedDataParallel> ddp;
  if (distributed) {
    ddp = std::make_unique<DistributedDataParallel>(gan, world());
    for (auto& [name, wrapper] : wrappers.items()) ddp->attach(*wrapper);
  }
  auto mine = [&](const Tensor& global) { return distributed ? slice_rows(global, rank, size) : global; };
  for (int it = 0; it < c.iterations; ++it) {
    gan->set_iteration(it);
    Tensor mix = Tensor::empty({kGlobalBatch});
    Generator mix_gen(500 + it);
    fill_uniform(mix, 0.0, 1.0, mix_gen);
    Batch batch{mine(random_tensor({kGlobalBatch, 1, 28, 28}, 100 + it)),
                mine(random_tensor({kGlobalBatch, gan->noise_dim()}, 300 + it)), mine(mix)};
    if (ddp) {
      ddp->train_step(batch, wrappers);
    } else {
      gan->train_step(batch, wrappers);
    }
  }
  return parameters_of(*gan);
}

}  // namespace

TEST_CASE("augmented GANs: N ranks equal one process on the global batch, penalties included",
          "[augment][oracle][penalty]") {
  for (const Case& c : kCases) {
    INFO(c.name << ", " << world()->size() << " ranks");
    const std::vector<Tensor> oracle = train_augmented(c, false);
    const std::vector<Tensor> got = train_augmented(c, true);
    require_close(got, oracle, 1e-5);
    require_replicas_identical(got, *world());
  }
}
