// BiGAN / ALI on Fashion-MNIST, written as a user of the installed tandem package would: an
// encoder E (x -> z), a generator G (z -> x) and a discriminator D on (x, z) pairs, each
// with its own optimizer and its own backward per iteration. D tells (x, E(x)) from
// (G(z), z); E and G learn to fool it, each from the half of the loss that reaches it.
// --wrap whole puts the three parts under one DistributedDataParallel, --wrap separate gives
// each its own Reducer (SeparateDistributedDataParallel); both train the same.
//
//   mpirun -np 2 bigan --iters 2000 --out runs/bigan --grid runs/bigan/grid.png
//
// As the cGAN: global-batch noise and the sampler's split of the global batch (N ranks at
// --batch B train as one process at --batch B), an EMA of G, a schedule over the three
// optimizers, and training::Manager for the run around the loop (resume, logs, checkpoints,
// stops): tests/package/examples_test.sh checks both.
#include <iostream>
#include <memory>
#include <string>

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

constexpr int64_t kLatent = 32, kHidden = 256, kPixels = 28 * 28;

struct Options {
  training::RunFlags run;
  training::OptimizerFlags opt;
  double ema_decay = 0.999;
  std::string schedule = "warmup:100", wrap = "whole", grid;
  std::string data_dir = data::kFashionMnistDefaultDir;
};

std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t out, std::shared_ptr<nn::Module> last = nullptr) {
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(in, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(kHidden, out));
  if (last) net->push_back(last);
  return net;
}

struct Bigan : DataParallelModel {
  std::shared_ptr<nn::Sequential> encoder = register_module("encoder", mlp(kPixels, kLatent));
  std::shared_ptr<nn::Sequential> generator =
      register_module("generator", mlp(kLatent, kPixels, std::make_shared<nn::Tanh>()));
  std::shared_ptr<nn::Sequential> discriminator = register_module("discriminator", mlp(kPixels + kLatent, 1));
  Variable score(const Variable& x, const Variable& z) { return discriminator->forward(concat({x, z}, 1)); }
};

std::unique_ptr<DataParallelWrapper> wrap(const Options& o, const std::shared_ptr<Bigan>& model,
                                          const std::shared_ptr<dist::ProcessGroup>& world) {
  if (o.wrap == "separate") return std::make_unique<SeparateDistributedDataParallel>(model, world);
  return std::make_unique<DistributedDataParallel>(model, world);
}

// Rows of 10 real images, each followed by a row of their reconstructions G(E(x)) by the
// EMA generator.
void write_grid(Bigan& model, const training::EmaWeights& ema, const data::ImageDataset& dataset,
                const Options& o) {
  NoGradGuard no_grad;
  training::ScopedAverage average(ema);
  std::vector<Variable> rows;
  for (int64_t r = 0; r < 5; ++r) {
    Variable x(dataset.images.narrow_rows(10 * r, 10).reshape({10, kPixels}));
    rows.push_back(x);
    rows.push_back(model.generator->forward(model.encoder->forward(x)));
  }
  data::write_png_gray_grid(o.grid, reshape(concat(rows, 0), {100, 1, 28, 28}).data(), 10);
  std::cout << "wrote " << o.grid << "\n";
}

int run_training(const Options& o) {
  dist::DistributedContext ctx;
  auto world = ctx.world();
  const int64_t batch = training::rows_per_rank(o.run.batch, *world);
  manual_seed(o.run.seed);
  auto model = std::make_shared<Bigan>();
  std::unique_ptr<DataParallelWrapper> ddp = wrap(o, model, world);
  auto opt_e = training::make_optimizer(o.opt, model->encoder->parameters());
  auto opt_g = training::make_optimizer(o.opt, model->generator->parameters());
  auto opt_d = training::make_optimizer(o.opt, model->discriminator->parameters());
  optim::LrScheduler scheduler({opt_e.get(), opt_g.get(), opt_d.get()}, optim::parse_lr_schedule(o.schedule));
  training::EmaWeights ema(model->generator->parameters(), o.ema_decay);
  const data::ImageDataset dataset = data::load_fashion_mnist(o.data_dir);
  const data::DistributedSampler sampler(dataset.size(), world->size(), world->rank(), batch, o.run.seed);

  training::Manager manager(world, training::manager_options(o.run, "bigan", sampler.batches_per_epoch()));
  manager.state().add_module("gan", *model);
  manager.state().add_optimizer("opt_e", *opt_e);
  manager.state().add_optimizer("opt_g", *opt_g);
  manager.state().add_optimizer("opt_d", *opt_d);
  manager.state().add_scheduler("schedule", scheduler);
  manager.state().add_ema("ema_g", ema);
  manager.extend(training::lr_schedule(scheduler));
  training::add_run_extensions(manager, o.run);
  manager.extend(training::replica_check(*ddp));
  manager.start();

  while (manager.running()) {
    const int64_t it = manager.iteration();
    ddp->sync_buffers();
    data::SampledBatch b = sampler.batch(dataset, manager.epoch(), manager.batch_in_epoch());
    Variable x(b.images.reshape({batch, kPixels}));
    Variable z(randn_global_rows({batch, kLatent}, o.run.seed, it, world->rank(), world->size()));
    Variable ex = model->encoder->forward(x);
    Variable gz = model->generator->forward(z);

    // D: (x, E(x)) is real, (G(z), z) is fake.
    Variable loss_d =
        mean(softplus(-model->score(x, ex.detach()))) + mean(softplus(model->score(gz.detach(), z)));
    opt_d->zero_grad();
    loss_d.backward();
    opt_d->step();

    // E and G, each with the flipped label on its own pair, each backward scoped to its part.
    Variable loss_e = mean(softplus(model->score(x, ex)));
    opt_e->zero_grad();
    loss_e.backward({.inputs = model->encoder->parameters()});
    opt_e->step();
    Variable loss_g = mean(softplus(-model->score(gz, z)));
    opt_g->zero_grad();
    loss_g.backward({.inputs = model->generator->parameters()});
    opt_g->step();
    ema.update(it);

    manager.end_iteration([&]() -> training::Scalars {
      return {{"loss_d", loss_d.item()},
              {"loss_e", loss_e.item()},
              {"loss_g", loss_g.item()},
              {"lr", opt_g->lr()}};
    });
  }
  manager.finish();
  if (world->rank() == 0 && !o.grid.empty() && !manager.stopped()) write_grid(*model, ema, dataset, o);
  return 0;
}

int bigan_main(int argc, char** argv) {
  Options o;
  CommandLine cl("bigan", "BiGAN / ALI on Fashion-MNIST, data-parallel over the MPI ranks.");
  training::add_run_flags(cl, o.run, "bigan");
  training::add_optimizer_flags(cl, o.opt);
  cl.add("--schedule", &o.schedule, "the learning-rate schedule (tandem-train's --lr-schedule syntax)");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "the generator's EMA decay (0: none)", 1.0);
  cl.add("--data-dir", &o.data_dir, "Fashion-MNIST's IDX files");
  cl.add("--grid", &o.grid, "at the end, write a picture of the generator's EMA weights' work here (PNG)");
  cl.add_choice("--wrap", &o.wrap, {"whole", "separate"}, "one Reducer for the model, or one per part");
  cl.parse(argc, argv);
  return run_training(o);
}

int main(int argc, char** argv) { return run_main(argc, argv, bigan_main); }
