// Data-parallel wrappers, as MMEngine's MMDistributedDataParallel and
// MMSeparateDistributedDataParallel, on tandem's scoped Reducer.
//
// Contract:
// - DistributedDataParallel(model, group, options) wraps a whole model in one Reducer over
//   every parameter that requires grad at wrap time (named as in model.named_parameters()).
//   Buffers are verified and broadcast from rank 0 at wrap time and, with
//   broadcast_buffers (default true), again before each train_step/val_step/test_step.
//   The model's parts are called directly (no `.module`): every backward through them is
//   synchronised automatically, whatever part it reaches.
// - train_step(batch, wrapper): preprocess, forward in loss mode, parse the losses (the
//   total is the sum of entries whose name contains "loss"), update_params(total); returns
//   the log values (each loss and the total, local to this rank). train_step(batch, dict)
//   hands over to the model's own train_step (GANs: a D update then a G update).
// - SeparateDistributedDataParallel gives every direct child with parameters its own
//   Reducer (named after the child); train_step(batch, dict) is the model's own.
// - Options carry PyTorch's names. find_unused_parameters and static_graph are accepted
//   and change nothing: tandem always scopes each backward to the parameters it reaches.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "reducer/optim_wrapper.h"
#include "reducer/reducer.h"

namespace tandem {

struct Batch {
  Tensor inputs;
  Tensor targets;  // may be undefined (GANs)
};

using LogVars = std::map<std::string, double>;
using Losses = std::vector<std::pair<std::string, Variable>>;

// A model trained through the wrappers. Override what the training style needs.
class DataParallelModel : public nn::Module {
 public:
  virtual Batch preprocess(const Batch& batch, bool training) { return batch; }
  // Forward in loss mode: named losses (and other logged values) for one batch.
  virtual Losses forward_losses(const Batch& batch);
  // Forward in predict mode (val/test).
  virtual Variable predict(const Batch& batch);
  // Models with several optimizers (GANs) implement their whole step here.
  virtual LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers);
};

// Sums the entries whose name contains "loss"; logs every entry and "loss" (the total).
std::pair<Variable, LogVars> parse_losses(const Losses& losses);

struct DdpOptions {
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  NonFinitePolicy non_finite = NonFinitePolicy::off;  // see reducer.h
  // Every this many train_steps, compare a hash of every parameter across ranks and
  // throw naming the first that differs (0: never).
  int64_t check_replicas_every = 0;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<DataParallelModel> model, std::shared_ptr<dist::ProcessGroup> group,
                          DdpOptions options = {});

  LogVars train_step(const Batch& batch, OptimWrapper& optim_wrapper);
  LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers);
  Variable val_step(const Batch& batch);
  Variable test_step(const Batch& batch) { return val_step(batch); }

  // Attaches this wrapper's Reducer to an optimizer wrapper (for accumulation); the
  // train_step overloads do it themselves.
  void attach(OptimWrapper& wrapper);
  void sync_buffers();
  Reducer& reducer() { return *reducer_; }
  [[nodiscard]] Reducer::NoSyncGuard no_sync() { return reducer_->no_sync(); }
  DataParallelModel& module() { return *model_; }
  const DdpOptions& options() const { return options_; }

 private:
  std::shared_ptr<DataParallelModel> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::vector<Tensor> buffers_;
  int64_t steps_ = 0;
};

class SeparateDistributedDataParallel {
 public:
  SeparateDistributedDataParallel(std::shared_ptr<DataParallelModel> model, std::shared_ptr<dist::ProcessGroup> group,
                                  DdpOptions options = {});

  LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers);
  Variable val_step(const Batch& batch);
  void train(bool on = true) { model_->train(on); }
  void sync_buffers();
  // The Reducer of one child ("generator", "discriminator"); throws naming it if absent.
  Reducer& reducer(const std::string& child);
  const std::map<std::string, std::unique_ptr<Reducer>>& reducers() const { return reducers_; }
  DataParallelModel& module() { return *model_; }

 private:
  std::shared_ptr<DataParallelModel> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  DdpOptions options_;
  std::map<std::string, std::unique_ptr<Reducer>> reducers_;
  std::vector<Tensor> buffers_;
  int64_t steps_ = 0;
};

}  // namespace tandem
