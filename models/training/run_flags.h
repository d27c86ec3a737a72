// The flags every training program built on training::Manager has, with one meaning in each:
// what a user of one tandem program expects of the next.
//
// Contract:
// - add_run_flags(cl, flags, name) adds --iters, --batch (the global batch), --seed, --out
//   (default "runs/<name>"), --resume, --log-every, --save-every, --keep-checkpoints and
//   --time-budget to `cl`; a program sets other defaults in `flags` first.
// - manager_options(flags, name, iterations_per_epoch) is the ManagerOptions they give:
//   global_batch --batch, checkpoints "<out>/<name>-<iteration>.safetensors".
// - add_run_extensions(manager, flags) registers what they ask for: log_report every
//   --log-every (averaged over the ranks; its page <out>/report.html), a snapshot every --save-every (keeping
//   the newest
//   --keep-checkpoints; 0: all), the progress line, stop_on_signal (SIGTERM, SIGUSR1), and
//   time_budget(--time-budget minutes, a tenth of it, at most a minute, kept for the
//   stop) when set. Returns the
//   log report (its latest() values).
// - rows_per_rank(global_batch, world): global_batch / world.size(), an Error naming the
//   rank count when that does not divide (--batch is the global batch).
// - add_optimizer_flags(cl, flags) adds --optimizer (adam or sgd) and --lr;
//   make_optimizer(flags, params) is Adam (flags.betas) or SGD (flags.momentum) at flags.lr.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/optim.h"
#include "models/training/extensions.h"
#include "models/training/manager.h"
#include "runtime/command_line.h"
#include "runtime/dist/process_group.h"

namespace tandem::training {

struct RunFlags {
  int64_t iters = 2000;
  int64_t batch = 128;  // the global batch, split over the ranks (rows_per_rank)
  uint64_t seed = 1;
  std::string out;
  bool resume = false;
  int64_t log_every = 50;
  int64_t save_every = 500;
  int64_t keep_checkpoints = 0;
  double time_budget_min = 0;
};

struct OptimizerFlags {
  std::string name = "adam";
  double lr = 2e-4;
  std::array<double, 2> betas = {0.5, 0.999};  // GANs' Adam (DCGAN's beta1)
  double momentum = 0.9;
};

void add_run_flags(CommandLine& cl, RunFlags& flags, const std::string& name);
void add_optimizer_flags(CommandLine& cl, OptimizerFlags& flags);
int64_t rows_per_rank(int64_t global_batch, const dist::ProcessGroup& world);
std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerFlags& flags, std::vector<Variable> params);
ManagerOptions manager_options(const RunFlags& flags, const std::string& name,
                               int64_t iterations_per_epoch = 0);
std::shared_ptr<LogReport> add_run_extensions(Manager& manager, const RunFlags& flags);

}  // namespace tandem::training
