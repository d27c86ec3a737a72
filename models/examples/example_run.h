// What the examples' training loops share, as a user with two such programs would factor it
// out: the common flags, the optimizer choice, and a run's plumbing around the loop (resume,
// Fashion-MNIST and its sampler, metrics.jsonl, the progress line, checkpoints, the final
// replica check). Each example keeps its model, its losses and its steps.
//
// - add_flags(cl, o, name): --iters --batch --seed --out --resume --optimizer --lr
//   --schedule --ema-decay --save-every --log-every --data-dir --grid.
// - make_optimizer(o, params): Adam (betas 0.5, 0.999) or SGD (momentum 0.9) at o.lr.
// - ExampleRun(o, name, checkpoint, world): with --resume loads the newest
//   "<out>/<name>-<iteration>.safetensors" into `checkpoint` on every rank (start() is its
//   iteration), else saves iteration 0 (the initial weights); loads the data; opens
//   metrics.jsonl from start(). rows_per_rank() is this rank's share of the global batch
//   (an Error unless the ranks divide it). batch(it) is this rank's rows of global batch it.
//   end_iteration(it, scalars) after iteration it: every --log-every iterations (and the
//   last) logs scalars() averaged over the ranks (collective) and updates the progress line;
//   every --save-every (and the last) saves the checkpoint at it + 1 (rank 0 writes).
//   finish(ddp): ends the progress line and checks the replicas (collective), which rank 0
//   reports as "replicas bitwise equal on N ranks".
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "autograd/optim.h"
#include "models/data/dataset.h"
#include "models/data/sampler.h"
#include "models/train/progress.h"
#include "models/train/scalar_log.h"
#include "models/train/train_checkpoint.h"
#include "reducer/ddp.h"
#include "runtime/checkpoint.h"
#include "runtime/command_line.h"
#include "runtime/dist/process_group.h"
#include "runtime/error.h"

namespace examples {

struct ExampleOptions {
  int64_t iters = 2000, batch = 128, save_every = 500, log_every = 50;
  uint64_t seed = 1;
  double lr = 2e-4, ema_decay = 0.999;
  std::string optimizer = "adam", schedule = "warmup:100", out, grid;
  std::string data_dir = tandem::data::kFashionMnistDefaultDir;
  bool resume = false;
};

inline void add_flags(tandem::CommandLine& cl, ExampleOptions& o, const std::string& name) {
  o.out = "runs/" + name;
  cl.add("--iters", &o.iters, "iterations in all (a resumed run goes on to this count)", 0);
  cl.add("--batch", &o.batch, "the global batch (split over the ranks)", 1);
  cl.add("--seed", &o.seed, "weights, data order and noise");
  cl.add("--out", &o.out, "metrics.jsonl and the checkpoints " + name + "-<iteration>.safetensors");
  cl.add_flag("--resume", &o.resume, "continue from the newest checkpoint in --out");
  cl.add_choice("--optimizer", &o.optimizer, {"adam", "sgd"},
                "Adam (betas 0.5, 0.999) or SGD (momentum 0.9)");
  cl.add_positive("--lr", &o.lr, "every optimizer's base learning rate");
  cl.add("--schedule", &o.schedule, "the learning-rate schedule (tandem-train's --lr-schedule syntax)");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "the generator's EMA decay (0: none)", 1.0);
  cl.add("--save-every", &o.save_every, "a checkpoint every this many iterations (and at the end)", 1);
  cl.add("--log-every", &o.log_every, "a metrics.jsonl line every this many iterations", 1);
  cl.add("--data-dir", &o.data_dir, "Fashion-MNIST's IDX files");
  cl.add("--grid", &o.grid, "at the end, write a picture of the generator's EMA weights' work here (PNG)");
}

inline std::unique_ptr<tandem::optim::Optimizer> make_optimizer(const ExampleOptions& o,
                                                                std::vector<tandem::Variable> params) {
  using namespace tandem::optim;
  if (o.optimizer == "sgd")
    return std::make_unique<SGD>(std::move(params), SGDOptions{.lr = o.lr, .momentum = 0.9});
  return std::make_unique<Adam>(std::move(params), AdamOptions{.lr = o.lr, .betas = {0.5, 0.999}});
}

class ExampleRun {
 public:
  ExampleRun(const ExampleOptions& o, std::string name, tandem::Checkpoint& checkpoint,
             std::shared_ptr<tandem::dist::ProcessGroup> world)
      : o_(o), name_(std::move(name)), checkpoint_(checkpoint), world_(std::move(world)) {
    const int ranks = world_->size();
    TANDEM_CHECK(o.batch % ranks == 0, "--batch " + std::to_string(o.batch) + " is not a multiple of the " +
                                           std::to_string(ranks) + " ranks");
    if (auto latest = o.resume ? tandem::find_latest_checkpoint(o.out, name_) : std::nullopt) {
      checkpoint_.load(*latest, *world_);
      if (world_->rank() == 0) std::cout << "resumed from " << *latest << "\n";
    }
    start_ = checkpoint_.iteration;
    dataset_ = tandem::data::load_fashion_mnist(o.data_dir);
    sampler_ = std::make_unique<tandem::data::DistributedSampler>(dataset_.size(), ranks, world_->rank(),
                                                                  rows_per_rank(), o.seed);
    log_ = std::make_unique<tandem::train::ScalarLog>(o.out, world_.get(), start_);
    progress_ = std::make_unique<tandem::train::Progress>(
        o.iters, std::cout, tandem::train::ProgressOptions{.rank = world_->rank(), .start = start_});
    if (start_ == 0) checkpoint_.save(tandem::checkpoint_path(o.out, name_, 0), *world_);
  }

  int64_t start() const { return start_; }
  int64_t rows_per_rank() const { return o_.batch / world_->size(); }
  const tandem::data::ImageDataset& dataset() const { return dataset_; }
  tandem::data::SampledBatch batch(int64_t it) const {
    const int64_t per_epoch = sampler_->batches_per_epoch();
    return sampler_->batch(dataset_, it / per_epoch, it % per_epoch);
  }

  void end_iteration(int64_t it, const std::function<tandem::train::Scalars()>& scalars) {
    const bool last = it + 1 == o_.iters;
    if ((it + 1) % o_.log_every == 0 || last) {
      progress_->update(it + 1, log_->log(it + 1, scalars(), tandem::train::Reduce::mean));
    }
    if ((it + 1) % o_.save_every == 0 || last) {
      checkpoint_.iteration = it + 1;
      checkpoint_.save(tandem::checkpoint_path(o_.out, name_, it + 1), *world_);
    }
  }

  void finish(tandem::DataParallelWrapper& ddp) {
    progress_->finish();
    ddp.check_replicas("at the end");
    if (world_->rank() == 0) std::cout << "replicas bitwise equal on " << world_->size() << " ranks\n";
  }

 private:
  const ExampleOptions& o_;
  std::string name_;
  tandem::Checkpoint& checkpoint_;
  std::shared_ptr<tandem::dist::ProcessGroup> world_;
  int64_t start_ = 0;
  tandem::data::ImageDataset dataset_;
  std::unique_ptr<tandem::data::DistributedSampler> sampler_;
  std::unique_ptr<tandem::train::ScalarLog> log_;
  std::unique_ptr<tandem::train::Progress> progress_;
};

}  // namespace examples
