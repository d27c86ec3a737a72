#include "models/training/run_flags.h"

#include <algorithm>
#include <cstdio>

#include "runtime/error.h"

namespace tandem::training {

void add_run_flags(CommandLine& cl, RunFlags& flags, const std::string& name) {
  if (flags.out.empty()) flags.out = "runs/" + name;
  cl.add("--iters", &flags.iters, "iterations in all (a resumed run goes on to this count)", 0);
  cl.add("--batch", &flags.batch, "the global batch (split over the ranks)", 1);
  cl.add("--seed", &flags.seed, "the run's random streams: weights, data order, noise");
  cl.add("--out", &flags.out, "metrics.jsonl and the checkpoints " + name + "-<iteration>.safetensors");
  cl.add_flag("--resume", &flags.resume, "continue from the newest sound checkpoint in --out");
  cl.add("--log-every", &flags.log_every, "a metrics.jsonl line every this many iterations (and at the end)",
         1);
  cl.add("--save-every", &flags.save_every, "a checkpoint every this many iterations (and at the end)", 1);
  cl.add("--keep-checkpoints", &flags.keep_checkpoints, "keep the newest this many checkpoints (0: all)", 0);
  cl.add_off_or_positive("--time-budget", &flags.time_budget_min,
                         "minutes: stop with a checkpoint before this much time has passed (0: no limit)");
}

void add_optimizer_flags(CommandLine& cl, OptimizerFlags& flags) {
  char help[96];
  std::snprintf(help, sizeof help, "Adam (betas %g, %g) or SGD (momentum %g)", flags.betas[0], flags.betas[1],
                flags.momentum);
  cl.add_choice("--optimizer", &flags.name, {"adam", "sgd"}, help);
  cl.add_positive("--lr", &flags.lr, "every optimizer's base learning rate");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerFlags& flags, std::vector<Variable> params) {
  if (flags.name == "sgd")
    return std::make_unique<optim::SGD>(std::move(params),
                                        optim::SGDOptions{.lr = flags.lr, .momentum = flags.momentum});
  return std::make_unique<optim::Adam>(std::move(params),
                                       optim::AdamOptions{.lr = flags.lr, .betas = flags.betas});
}

int64_t rows_per_rank(int64_t global_batch, const dist::ProcessGroup& world) {
  TANDEM_CHECK(global_batch % world.size() == 0,
               "--batch " << global_batch << " is not a multiple of the " << world.size() << " ranks");
  return global_batch / world.size();
}

ManagerOptions manager_options(const RunFlags& flags, const std::string& name, int64_t iterations_per_epoch) {
  return {.iterations = flags.iters,
          .global_batch = flags.batch,
          .iterations_per_epoch = iterations_per_epoch,
          .out = flags.out,
          .name = name,
          .resume = flags.resume};
}

std::shared_ptr<LogReport> add_run_extensions(Manager& manager, const RunFlags& flags) {
  if (flags.time_budget_min > 0)
    manager.extend(time_budget(
        {.seconds = 60.0 * flags.time_budget_min, .reserve_s = std::min(60.0, 6.0 * flags.time_budget_min)}));
  manager.extend(stop_on_signal());
  manager.extend(snapshot({.keep = static_cast<int>(flags.keep_checkpoints)}), every(flags.save_every));
  std::shared_ptr<LogReport> log = log_report();
  manager.extend(log, every(flags.log_every));
  manager.extend(progress_bar());
  return log;
}

}  // namespace tandem::training
