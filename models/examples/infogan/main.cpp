// InfoGAN on Fashion-MNIST, written as a user of the installed tandem package would: the
// generator draws from noise, a categorical code (10 values) and two continuous codes; the
// discriminator's body is shared by two heads, D (real or fake) and Q (which code made this
// picture?). Three optimizers: D's (body and D head), G's and Q's. Two backwards per
// iteration, each scoped to the parameters it trains: D's loss reaches the body and the D
// head; G's adversarial loss plus the information loss reaches G, the body and both heads,
// and is scoped to G and Q, so the body and the D head sit that backward out.
//
//   mpirun -np 2 infogan --iters 2000 --out runs/infogan --grid runs/infogan/grid.png
//
// As the other examples: global-batch noise and codes, the sampler's split of the global
// batch (N ranks at --batch B train as one process at --batch B), training::Manager for the run
// around the loop; tests/package/examples_test.sh checks both.
#include <iostream>
#include <memory>

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
#include "runtime/global_draws.h"
#include "runtime/rng.h"

using namespace tandem;

constexpr int64_t kNoise = 62, kClasses = 10, kContinuous = 2, kHidden = 256, kPixels = 28 * 28;
// Each draw's stream key: the seed with its purpose mixed in (runtime/global_draws.h).
constexpr uint64_t kClassKey = 0x636c617373ULL, kContinuousKey = 0x636f6e74ULL;

struct Options {
  training::RunFlags run;
  training::OptimizerFlags opt;
  double ema_decay = 0.999, info_weight = 1.0;
  std::string schedule = "warmup:100", grid, data_dir = data::kFashionMnistDefaultDir;
};

std::shared_ptr<nn::Sequential> mlp(int64_t in, int64_t out, std::shared_ptr<nn::Module> last) {
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(in, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(kHidden, kHidden), std::make_shared<nn::LeakyReLU>(0.2),
      std::make_shared<nn::Linear>(kHidden, out));
  if (last) net->push_back(last);
  return net;
}

struct Codes {
  Tensor classes;     // int64 [N]
  Tensor continuous;  // [N, kContinuous]
};

// Q's guess of the codes: class logits, and the continuous codes' means.
struct QHead : nn::Module {
  std::shared_ptr<nn::Linear> classes =
      register_module("classes", std::make_shared<nn::Linear>(kHidden, kClasses));
  std::shared_ptr<nn::Linear> continuous =
      register_module("continuous", std::make_shared<nn::Linear>(kHidden, kContinuous));
  // The information loss: the categorical code's cross-entropy plus the continuous codes'
  // Gaussian log-likelihood at unit variance (half the squared error), both means.
  Variable loss(const Variable& h, const Codes& codes) {
    Variable error = continuous->forward(h) - Variable(codes.continuous);
    return cross_entropy(classes->forward(h), codes.classes) + mean(square(error)) * 0.5;
  }
};

// D: the shared body and the D head (real or fake).
struct Critic : nn::Module {
  std::shared_ptr<nn::Sequential> body =
      register_module("body", mlp(kPixels, kHidden, std::make_shared<nn::LeakyReLU>(0.2)));
  std::shared_ptr<nn::Linear> head = register_module("head", std::make_shared<nn::Linear>(kHidden, 1));
  Variable forward(const Variable& x) override { return head->forward(body->forward(x)); }
};

struct InfoGan : DataParallelModel {
  std::shared_ptr<nn::Sequential> generator = register_module(
      "generator", mlp(kNoise + kClasses + kContinuous, kPixels, std::make_shared<nn::Tanh>()));
  std::shared_ptr<Critic> critic = register_module("critic", std::make_shared<Critic>());
  std::shared_ptr<QHead> q_head = register_module("q_head", std::make_shared<QHead>());
  Variable generate(const Variable& z, const Codes& codes) {
    return generator->forward(concat({z, one_hot(codes.classes, kClasses), Variable(codes.continuous)}, 1));
  }
  std::vector<Variable> generator_and_q_parameters() {
    std::vector<Variable> both = generator->parameters(), q = q_head->parameters();
    both.insert(both.end(), q.begin(), q.end());
    return both;
  }
};

// Row k: class k; along the row the first continuous code from -2 to 2; one noise for all.
void write_grid(InfoGan& gan, const training::EmaWeights& ema, const Options& o) {
  NoGradGuard no_grad;
  training::ScopedAverage average(ema);
  std::vector<double> classes, continuous;
  for (int64_t k = 0; k < kClasses * kClasses; ++k) {
    classes.push_back(static_cast<double>(k / kClasses));
    continuous.insert(continuous.end(),
                      {-2.0 + 4.0 * static_cast<double>(k % kClasses) / (kClasses - 1), 0.0});
  }
  Tensor noise = randn_rows({1, kNoise}, 0, o.run.seed, /*iteration=*/0);
  Variable z = concat(std::vector<Variable>(kClasses * kClasses, Variable(noise)), 0);
  const Codes codes = {Tensor::from_values({kClasses * kClasses}, classes, DType::i64),
                       Tensor::from_values({kClasses * kClasses, kContinuous}, continuous)};
  Variable images = gan.generate(z, codes);
  data::write_png_gray_grid(o.grid, reshape(images, {kClasses * kClasses, 1, 28, 28}).data(), kClasses);
  std::cout << "wrote " << o.grid << "\n";
}

int run_training(const Options& o) {
  dist::DistributedContext ctx;
  auto world = ctx.world();
  const int64_t batch = training::rows_per_rank(o.run.batch, *world);
  const int rank = world->rank(), ranks = world->size();
  manual_seed(o.run.seed);
  auto gan = std::make_shared<InfoGan>();
  DistributedDataParallel ddp(gan, world);
  auto opt_d = training::make_optimizer(o.opt, gan->critic->parameters());
  auto opt_g = training::make_optimizer(o.opt, gan->generator->parameters());
  auto opt_q = training::make_optimizer(o.opt, gan->q_head->parameters());
  optim::LrScheduler scheduler({opt_d.get(), opt_g.get(), opt_q.get()}, optim::parse_lr_schedule(o.schedule));
  training::EmaWeights ema(gan->generator->parameters(), o.ema_decay);
  const data::ImageDataset dataset = data::load_fashion_mnist(o.data_dir);
  const data::DistributedSampler sampler(dataset.size(), ranks, rank, batch, o.run.seed);

  training::Manager manager(world, training::manager_options(o.run, "infogan", sampler.batches_per_epoch()));
  manager.state().add_module("gan", *gan);
  manager.state().add_optimizer("opt_d", *opt_d);
  manager.state().add_optimizer("opt_g", *opt_g);
  manager.state().add_optimizer("opt_q", *opt_q);
  manager.state().add_scheduler("schedule", scheduler);
  manager.state().add_ema("ema_g", ema);
  manager.extend(training::lr_schedule(scheduler));
  training::add_run_extensions(manager, o.run);
  manager.extend(training::replica_check(ddp));
  manager.start();

  while (manager.running()) {
    const int64_t it = manager.iteration();
    ddp.sync_buffers();
    data::SampledBatch b = sampler.batch(dataset, manager.epoch(), manager.batch_in_epoch());
    Variable real(b.images.reshape({batch, kPixels}));
    Variable z(randn_global_rows({batch, kNoise}, o.run.seed, it, rank, ranks));
    const Codes codes = {
        randint_global_rows({batch}, kClasses, o.run.seed ^ kClassKey, it, rank, ranks),
        randn_global_rows({batch, kContinuous}, o.run.seed ^ kContinuousKey, it, rank, ranks)};
    Variable fake = gan->generate(z, codes);

    // D: the body and the D head (Q's head is not reached).
    Variable loss_d =
        mean(softplus(gan->critic->forward(fake.detach()))) + mean(softplus(-gan->critic->forward(real)));
    opt_d->zero_grad();
    loss_d.backward();
    opt_d->step();

    // G and Q: fool D, and make the codes readable from the picture.
    Variable h = gan->critic->body->forward(fake);
    Variable loss_g = mean(softplus(-gan->critic->head->forward(h)));
    Variable loss_info = gan->q_head->loss(h, codes);
    opt_g->zero_grad();
    opt_q->zero_grad();
    (loss_g + loss_info * o.info_weight).backward({.inputs = gan->generator_and_q_parameters()});
    opt_g->step();
    opt_q->step();
    ema.update(it);

    manager.end_iteration([&]() -> training::Scalars {
      return {{"loss_d", loss_d.item()},
              {"loss_g", loss_g.item()},
              {"loss_info", loss_info.item()},
              {"lr", opt_g->lr()}};
    });
  }
  manager.finish();
  if (rank == 0 && !o.grid.empty() && !manager.stopped()) write_grid(*gan, ema, o);
  return 0;
}

int infogan_main(int argc, char** argv) {
  Options o;
  CommandLine cl("infogan", "InfoGAN on Fashion-MNIST, data-parallel over the MPI ranks.");
  training::add_run_flags(cl, o.run, "infogan");
  training::add_optimizer_flags(cl, o.opt);
  cl.add("--schedule", &o.schedule, "the learning-rate schedule (tandem-train's --lr-schedule syntax)");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "the generator's EMA decay (0: none)", 1.0);
  cl.add("--data-dir", &o.data_dir, "Fashion-MNIST's IDX files");
  cl.add("--grid", &o.grid, "at the end, write a picture of the codes' effect (EMA generator) here (PNG)");
  cl.add_positive("--info-weight", &o.info_weight, "the information loss's weight (lambda)");
  cl.parse(argc, argv);
  return run_training(o);
}

int main(int argc, char** argv) { return run_main(argc, argv, infogan_main); }
