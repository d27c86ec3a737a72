// A class-conditional GAN on Fashion-MNIST, written as a user of the installed tandem package
// would: the README's plain loop on a whole-model DistributedDataParallel, labels through
// nn::Embedding (the generator's input, the discriminator's projection), R1 written by hand
// with grad() every --r1-every steps (lazy), an EMA of the generator, a learning-rate
// schedule. The run around the loop is training::Manager's: resume, metrics.jsonl, the
// progress line, checkpoints, a stop on SIGTERM, the final replica check.
//
//   mpirun -np 2 cgan --iters 2000 --out runs/cgan --grid runs/cgan/grid.png
//
// Noise is global-batch noise (randn_global_rows) and the sampler splits the global batch,
// so N ranks at --batch B train exactly as one process at --batch B: the examples' test
// checks that (tests/package/examples_test.sh), and that a resumed run continues bitwise.
#include <iostream>
#include <memory>

#include "autograd/grad.h"
#include "autograd/grad_mode.h"
#include "autograd/lr_scheduler.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "models/data/dataset.h"
#include "models/data/png_writer.h"
#include "models/data/sampler.h"
#include "models/training/ema_weights.h"
#include "models/training/run_flags.h"
#include "reducer/ddp.h"
#include "runtime/command_line.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"
#include "runtime/rng.h"

using namespace tandem;

constexpr int64_t kClasses = 10, kNoise = 64, kHidden = 256, kPixels = 28 * 28;

struct Options {
  training::RunFlags run;
  training::OptimizerFlags opt;
  int64_t r1_every = 4;
  double ema_decay = 0.999, r1_gamma = 1.0;
  std::string schedule = "warmup:100", grid, data_dir = data::kFashionMnistDefaultDir;
};

// G(z, y): the noise and the label's embedding, pixel-normalised together, through an MLP.
struct CondGenerator : nn::Module {
  std::shared_ptr<nn::Embedding> embed =
      register_module("embed", std::make_shared<nn::Embedding>(kClasses, kNoise));
  std::shared_ptr<nn::Sequential> net = register_module(
      "net", std::make_shared<nn::Sequential>(
                 std::make_shared<nn::Linear>(2 * kNoise, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
                 std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
                 std::make_shared<nn::Linear>(kHidden, kPixels), std::make_shared<nn::Tanh>()));
  Variable generate(const Variable& z, const Tensor& labels) {
    Variable h = concat({z, embed->forward(labels)}, 1);
    return net->forward(h / sqrt(mean(square(h), 1, true) + 1e-8));  // [N, 2Z] / [N, 1]
  }
};

// D(x, y) = out(h) + <embed(y), h>, h = body(x): a projection discriminator (logits [N, 1]).
struct CondDiscriminator : nn::Module {
  std::shared_ptr<nn::Sequential> body = register_module(
      "body", std::make_shared<nn::Sequential>(
                  std::make_shared<nn::Linear>(kPixels, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
                  std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::LeakyReLU>(0.2)));
  std::shared_ptr<nn::Linear> out = register_module("out", std::make_shared<nn::Linear>(kHidden, 1));
  std::shared_ptr<nn::Embedding> embed =
      register_module("embed", std::make_shared<nn::Embedding>(kClasses, kHidden));
  Variable score(const Variable& x, const Tensor& labels) {
    Variable h = body->forward(x);
    return out->forward(h) + sum(h * embed->forward(labels), 1, true);
  }
};

struct CondGan : DataParallelModel {
  std::shared_ptr<CondGenerator> generator = register_module("generator", std::make_shared<CondGenerator>());
  std::shared_ptr<CondDiscriminator> discriminator =
      register_module("discriminator", std::make_shared<CondDiscriminator>());
};

// One row per class (column j: the same noise in every row), from the generator's EMA weights.
void write_grid(CondGan& gan, const training::EmaWeights& ema, const Options& o) {
  NoGradGuard no_grad;
  training::ScopedAverage average(ema);
  std::vector<double> labels;
  for (int64_t k = 0; k < kClasses * kClasses; ++k) labels.push_back(static_cast<double>(k / kClasses));
  Tensor noise_row = randn_rows({kClasses, kNoise}, 0, o.run.seed, /*iteration=*/0);
  Variable z = concat(std::vector<Variable>(kClasses, Variable(noise_row)), 0);
  Variable images =
      gan.generator->generate(z, Tensor::from_values({kClasses * kClasses}, labels, DType::i64));
  data::write_png_gray_grid(o.grid, reshape(images, {kClasses * kClasses, 1, 28, 28}).data(), kClasses);
  std::cout << "wrote " << o.grid << "\n";
}

int run_training(const Options& o) {
  dist::DistributedContext ctx;
  auto world = ctx.world();
  const int64_t batch = training::rows_per_rank(o.run.batch, *world);
  manual_seed(o.run.seed);  // the initial weights (rank 0's reach every rank anyway)
  auto gan = std::make_shared<CondGan>();
  DistributedDataParallel ddp(gan, world);
  auto opt_g = training::make_optimizer(o.opt, gan->generator->parameters());
  auto opt_d = training::make_optimizer(o.opt, gan->discriminator->parameters());
  optim::LrScheduler scheduler({opt_g.get(), opt_d.get()}, optim::parse_lr_schedule(o.schedule));
  training::EmaWeights ema(gan->generator->parameters(), o.ema_decay);
  const data::ImageDataset dataset = data::load_fashion_mnist(o.data_dir);
  const data::DistributedSampler sampler(dataset.size(), world->size(), world->rank(), batch, o.run.seed);

  training::Manager manager(world, training::manager_options(o.run, "cgan", sampler.batches_per_epoch()));
  manager.state().add_module("gan", *gan);
  manager.state().add_optimizer("opt_g", *opt_g);
  manager.state().add_optimizer("opt_d", *opt_d);
  manager.state().add_scheduler("schedule", scheduler);
  manager.state().add_ema("ema_g", ema);
  manager.extend(training::lr_schedule(scheduler));
  training::add_run_extensions(manager, o.run);
  manager.extend(training::replica_check(ddp));
  manager.start();

  double r1_value = 0.0;  // the latest R1, for the log
  while (manager.running()) {
    const int64_t it = manager.iteration();
    ddp.sync_buffers();
    data::SampledBatch b = sampler.batch(dataset, manager.epoch(), manager.batch_in_epoch());
    Variable real(b.images.reshape({batch, kPixels}), /*requires_grad=*/true);  // R1 differentiates by it
    Variable z(randn_global_rows({batch, kNoise}, o.run.seed, it, world->rank(), world->size()));
    Variable fake = gan->generator->generate(z, b.labels);

    // D step; every r1_every steps with R1 = gamma/2 E|grad_x D(x)|^2 on real data, times
    // r1_every (lazy regularisation). grad() is not a backward: loss_d's backward syncs it.
    Variable d_real = gan->discriminator->score(real, b.labels);
    Variable loss_d =
        mean(softplus(gan->discriminator->score(fake.detach(), b.labels))) + mean(softplus(-d_real));
    if (o.r1_every > 0 && it % o.r1_every == 0) {
      Variable g = grad({sum(d_real)}, {real}, {}, {.create_graph = true})[0];
      Variable r1 = mean(sum(square(g), 1));
      r1_value = r1.item();
      loss_d = loss_d + r1 * (0.5 * o.r1_gamma * static_cast<double>(o.r1_every));
    }
    opt_d->zero_grad();
    loss_d.backward();
    opt_d->step();

    // G step: its backward computes and averages G's gradients alone.
    Variable loss_g = mean(softplus(-gan->discriminator->score(fake, b.labels)));
    opt_g->zero_grad();
    loss_g.backward({.inputs = gan->generator->parameters()});
    opt_g->step();
    ema.update(it);

    manager.end_iteration([&]() -> training::Scalars {
      return {{"loss_d", loss_d.item()}, {"loss_g", loss_g.item()}, {"r1", r1_value}, {"lr", opt_g->lr()}};
    });
  }
  manager.finish();
  if (world->rank() == 0 && !o.grid.empty() && !manager.stopped()) write_grid(*gan, ema, o);
  return 0;
}

int cgan_main(int argc, char** argv) {
  Options o;
  CommandLine cl("cgan", "A class-conditional GAN on Fashion-MNIST, data-parallel over the MPI ranks.");
  training::add_run_flags(cl, o.run, "cgan");
  training::add_optimizer_flags(cl, o.opt);
  cl.add("--schedule", &o.schedule, "the learning-rate schedule (tandem-train's --lr-schedule syntax)");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "the generator's EMA decay (0: none)", 1.0);
  cl.add("--data-dir", &o.data_dir, "Fashion-MNIST's IDX files");
  cl.add("--grid", &o.grid, "at the end, write a picture of the generator's EMA weights' work here (PNG)");
  cl.add("--r1-every", &o.r1_every, "R1 on the D step every this many iterations (0: never)", 0);
  cl.add_positive("--r1-gamma", &o.r1_gamma, "R1's weight");
  cl.parse(argc, argv);
  return run_training(o);
}

int main(int argc, char** argv) { return run_main(argc, argv, cgan_main); }
