// R3GAN's recipe (Huang et al. 2024) on Fashion-MNIST, written as a user of the installed
// tandem package would: tandem's R3GAN networks, the relativistic pairing loss (RpGAN), R1 on
// real and R2 on generated images, an EMA of the generator, and R3GAN's schedules as functions
// of the images shown (training::hyper_schedule): the learning rate and the penalties' gamma
// fall along a cosine from their start to their end value over --kimg. --bf16-res K runs the
// layers of the K highest resolutions in bfloat16, as R3GAN trains its late stages: their
// GEMMs and convolutions read bf16 operands and accumulate in float32, while the weights,
// their gradients, Adam and the EMA stay float32; bf16 has float32's range, so no loss scale.
//
//   mpirun -np 2 r3gan --kimg 64 --batch 64 --out runs/r3gan --grid runs/r3gan/grid.png
//
// As the other examples: global-batch noise, the sampler's split of the global batch, and
// training::Manager for the run around the loop.
#include <cmath>
#include <iostream>
#include <memory>
#include <numbers>

#include "autograd/grad_mode.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "models/data/dataset.h"
#include "models/data/png_writer.h"
#include "models/data/sampler.h"
#include "models/gradient_penalty.h"
#include "models/r3gan.h"
#include "models/training/ema_weights.h"
#include "models/training/run_flags.h"
#include "reducer/ddp.h"
#include "runtime/command_line.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"
#include "runtime/rng.h"

using namespace tandem;

constexpr int64_t kNoise = models::R3gan::kNoise;

struct Options {
  training::RunFlags run = {.batch = 64};
  double kimg = 64, lr_start = 2e-4, lr_end = 5e-5, gamma_start = 1.0, gamma_end = 0.1, ema_decay = 0.999;
  int64_t bf16_res = 0;  // 0: every layer in float32
  std::string grid, data_dir = data::kFashionMnistDefaultDir;
};

// The model: tandem's R3GAN generator and discriminator, registered as one module.
struct R3 : DataParallelModel {
  explicit R3(uint64_t seed) : init(seed) {}
  Generator init;  // the weights' stream
  std::shared_ptr<models::R3ganGenerator> g =
      register_module("generator", std::make_shared<models::R3ganGenerator>(kNoise, 1, init));
  std::shared_ptr<models::R3ganDiscriminator> d =
      register_module("discriminator", std::make_shared<models::R3ganDiscriminator>(1, init));
};

// From `start` at 0 kimg to `end` at `total` kimg along half a cosine, then `end`.
double cosine(double start, double end, double kimg, double total) {
  const double t = std::min(kimg / total, 1.0);
  return end + (start - end) * 0.5 * (1.0 + std::cos(std::numbers::pi * t));
}

int run_training(Options o, bool iters_given) {
  dist::DistributedContext ctx;
  auto world = ctx.world();
  const int64_t batch = training::rows_per_rank(o.run.batch, *world);
  if (!iters_given)
    o.run.iters = static_cast<int64_t>(std::ceil(o.kimg * 1000.0 / static_cast<double>(o.run.batch)));
  auto model = std::make_shared<R3>(o.run.seed);
  if (o.bf16_res > 0)  // a module's compute dtype (autograd/module.h), set before the first forward
    models::set_low_precision(models::r3gan_resolution_layers(*model->g, *model->d), DType::bf16, o.bf16_res,
                              "r3gan");
  DistributedDataParallel ddp(model, world);
  optim::Adam opt_g(model->g->parameters(), {.lr = o.lr_start, .betas = {0.0, 0.99}});
  optim::Adam opt_d(model->d->parameters(), {.lr = o.lr_start, .betas = {0.0, 0.99}});
  training::EmaWeights ema(model->g->parameters(), o.ema_decay);
  const data::ImageDataset dataset = data::load_fashion_mnist(o.data_dir);
  const data::DistributedSampler sampler(dataset.size(), world->size(), world->rank(), batch, o.run.seed);
  double gamma = o.gamma_start;

  training::Manager manager(world, training::manager_options(o.run, "r3gan", sampler.batches_per_epoch()));
  manager.state().add_module("gan", *model);
  manager.state().add_optimizer("opt_g", opt_g);
  manager.state().add_optimizer("opt_d", opt_d);
  manager.state().add_ema("ema_g", ema);
  manager.extend(training::hyper_schedule([&](double k) { return cosine(o.lr_start, o.lr_end, k, o.kimg); },
                                          [&](double lr) { opt_g.set_lr(lr), opt_d.set_lr(lr); }));
  manager.extend(training::hyper_schedule(
      [&](double k) { return cosine(o.gamma_start, o.gamma_end, k, o.kimg); }, [&](double g) { gamma = g; }));
  training::add_run_extensions(manager, o.run);
  manager.extend(training::replica_check(ddp));
  manager.start();

  while (manager.running()) {
    const int64_t it = manager.iteration();
    data::SampledBatch b = sampler.batch(dataset, manager.epoch(), manager.batch_in_epoch());
    Variable z(randn_global_rows({batch, kNoise}, o.run.seed, it, world->rank(), world->size()));
    Variable fake = model->g->forward(z);

    // D: RpGAN's softplus(D(fake) - D(real)), R1 on the reals and R2 on the fakes, each
    // gamma / 2 E|grad D|^2 on a leaf of its own.
    Variable real(b.images, /*requires_grad=*/true);
    Variable fake_leaf(fake.data(), /*requires_grad=*/true);
    Variable d_real = model->d->forward(real), d_fake = model->d->forward(fake_leaf);
    Variable r1 = models::r1_penalty(d_real, real), r2 = models::r1_penalty(d_fake, fake_leaf);
    Variable loss_d = mean(softplus(d_fake - d_real)) + (r1 + r2) * (0.5 * gamma);
    opt_d.zero_grad();
    loss_d.backward();
    opt_d.step();

    // G: RpGAN's other side, on fresh scores of the same pairs; G's parameters alone.
    Variable loss_g = mean(softplus(model->d->forward(real.detach()) - model->d->forward(fake)));
    opt_g.zero_grad();
    loss_g.backward({.inputs = model->g->parameters()});
    opt_g.step();
    ema.update(it);

    manager.end_iteration([&]() -> training::Scalars {
      return {{"loss_d", loss_d.item()}, {"loss_g", loss_g.item()}, {"r1", r1.item()},
              {"r2", r2.item()},         {"gamma", gamma},          {"lr", opt_g.lr()}};
    });
  }
  manager.finish();
  if (world->rank() == 0 && !o.grid.empty() && !manager.stopped()) {
    NoGradGuard no_grad;
    training::ScopedAverage average(ema);
    Variable images = model->g->forward(Variable(randn_rows({100, kNoise}, 0, o.run.seed, /*iteration=*/0)));
    data::write_png_gray_grid(o.grid, images.data(), 10);
    std::cout << "wrote " << o.grid << "\n";
  }
  return 0;
}

int r3gan_main(int argc, char** argv) {
  Options o;
  CommandLine cl("r3gan", "R3GAN's recipe on Fashion-MNIST, data-parallel over the MPI ranks.");
  training::add_run_flags(cl, o.run, "r3gan");
  cl.add_positive("--kimg", &o.kimg, "the schedules' length in thousands of images; --iters defaults to it");
  cl.add_positive("--lr-start", &o.lr_start, "both optimizers' learning rate at 0 kimg");
  cl.add_positive("--lr-end", &o.lr_end, "... and from --kimg on");
  cl.add_positive("--gamma-start", &o.gamma_start, "R1's and R2's gamma at 0 kimg");
  cl.add_positive("--gamma-end", &o.gamma_end, "... and from --kimg on");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "the generator's EMA decay (0: none)", 1.0);
  cl.add("--bf16-res", &o.bf16_res,
         "the layers of this many of the highest resolutions (28, 14, 7) in bfloat16 (0: none)", 0, 3);
  cl.add("--data-dir", &o.data_dir, "Fashion-MNIST's IDX files");
  cl.add("--grid", &o.grid, "at the end, write 100 samples of the EMA generator here (PNG)");
  cl.parse(argc, argv);
  return run_training(o, cl.given("--iters"));
}

int main(int argc, char** argv) { return run_main(argc, argv, r3gan_main); }
