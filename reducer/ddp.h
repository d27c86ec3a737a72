// Data-parallel wrappers, as MMEngine's MMDistributedDataParallel and
// MMSeparateDistributedDataParallel, on tandem's scoped Reducer.
//
// Contract:
// - DistributedDataParallel(model, group, options) wraps a whole model in one Reducer over
//   every parameter that requires grad at wrap time (named as in model.named_parameters()).
//   Buffers are verified and broadcast from rank 0 at wrap time and, with
//   broadcast_buffers (default true), again before each train_step/val_step/test_step and
//   at each sync_buffers() (the plain loop's point, at the top of each iteration, before
//   the forward). The model's parts are called directly (no `.module`): every backward
//   through them is synchronised automatically, whatever part it reaches.
// - check_replicas(when) (collective; every check_replicas_every train_steps, or called by
//   the plain loop) compares a hash of every parameter across ranks, and of every buffer
//   where buffers are meant to agree: with broadcast_buffers on more than one rank it
//   broadcasts them from rank 0 first, as the next forward would, then compares them
//   (catching a buffer the broadcast does not reach). Without broadcast_buffers each rank
//   keeps its own buffers (batch-norm running statistics follow the rank's own data), so
//   they are not compared. A difference is an Error on every rank naming the first
//   differing tensor and `when`.
// - train_step(batch, wrapper): preprocess, forward in loss mode, parse the losses (the
//   total is the sum of entries whose name contains "loss"), update_params(total); returns
//   the log values (each loss and the total, local to this rank). train_step(batch, dict)
//   hands over to the model's own train_step (GANs: a D update then a G update).
// - SeparateDistributedDataParallel gives every direct child with parameters its own
//   Reducer (named after the child); train_step(batch, dict) is the model's own.
// - Refused with an Error, before any communication: a model with no registered parameter
//   that requires grad (layers assigned to members without register_module are invisible:
//   the message says how to register them), for SeparateDistributedDataParallel a
//   parameter registered on the model itself rather than in a child, and a model (or any
//   parameter) already wrapped by a live wrapper (see Reducer).
// - Both derive from DataParallelWrapper, which holds what they share (buffers, step
//   count, replica check, val/test steps, train_step over a dictionary, and
//   register_comm_hook / register_pre_bucket_hook on every Reducer, one handle for all).
// - DdpOptions::reducer is the ReducerOptions of every Reducer the wrapper makes; what each
//   option does, and what every backward through the model is promised, is the Reducer's
//   contract (reducer.h). One addition here: reducer.broadcast_function also replaces the
//   buffers' broadcasts from rank 0 (at wrap time and in sync_buffers).
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
  Tensor targets;   // may be undefined (GANs)
  Tensor aux = {};  // may be undefined: more per-sample data a model's own train_step takes
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
  // The options of every Reducer the wrapper makes (reducer.h); `reducer.name` is set by
  // the wrapper (the model's type name, or the child's name).
  ReducerOptions reducer;
  bool broadcast_buffers = true;
  // Every this many train_steps, check_replicas (parameters; buffers after their
  // broadcast) and throw naming the first tensor that differs (0: never).
  int64_t check_replicas_every = 0;
};

// What both wrappers share: the model, the group, the options, the buffers (verified and
// broadcast from rank 0 at wrap time), the step count, buffer broadcasting, val/test steps
// and the train_step over an optimizer-wrapper dictionary.
class DataParallelWrapper {
 public:
  virtual ~DataParallelWrapper() = default;
  DataParallelWrapper(const DataParallelWrapper&) = delete;
  DataParallelWrapper& operator=(const DataParallelWrapper&) = delete;

  // Attaches every Reducer of this wrapper to each optimizer wrapper, broadcasts buffers,
  // runs the model's own train_step, then the replica check when due.
  LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers);
  Variable val_step(const Batch& batch);
  Variable test_step(const Batch& batch) { return val_step(batch); }
  // Broadcasts the buffers from rank 0 (with broadcast_buffers, on more than one rank).
  // train_step/val_step call it first; a plain loop calls it at the top of each iteration.
  void sync_buffers();
  // Collective: compares parameters, and buffers after sync_buffers (see the contract);
  // throws on every rank naming the first differing tensor and `when` ("after step 300";
  // empty: "at replica check <n>", counting the calls).
  void check_replicas(const std::string& when = "");
  void train(bool on = true) { model_->train(on); }
  DataParallelModel& module() { return *model_; }
  const DdpOptions& options() const { return options_; }
  // Attaches this wrapper's Reducers to an optimizer wrapper (for accumulation and the
  // skip_step policy); the train_step overloads do it themselves.
  virtual void attach(OptimWrapper& wrapper) = 0;
  // Every Reducer this wrapper made (one, or one per child with parameters).
  virtual std::vector<const Reducer*> all_reducers() const = 0;
  // Registers the hook with every Reducer of this wrapper (reducer_hooks.h); the handle's
  // remove() takes it from all of them. From the next backward on.
  HookHandle register_comm_hook(std::shared_ptr<CommHook> hook);
  HookHandle register_pre_bucket_hook(PreBucketHook hook);

 protected:
  DataParallelWrapper(std::shared_ptr<DataParallelModel> model, std::shared_ptr<dist::ProcessGroup> group,
                      DdpOptions options, const char* wrapper_name);
  // The Reducer options for one Reducer named `name`.
  ReducerOptions reducer_options(std::string name) const;
  // Verifies and broadcasts the buffers; call once the Reducers exist.
  void wrap_buffers();
  // The Reducers, to register hooks with.
  virtual std::vector<Reducer*> mutable_reducers() = 0;
  // Counts a train_step and runs the replica check when it is due.
  void finish_train_step();

  std::shared_ptr<DataParallelModel> model_;
  std::shared_ptr<dist::ProcessGroup> group_;
  DdpOptions options_;

 private:
  std::vector<Tensor> buffers_;
  int64_t steps_ = 0;
  int64_t checks_ = 0;
};

class DistributedDataParallel final : public DataParallelWrapper {
 public:
  DistributedDataParallel(std::shared_ptr<DataParallelModel> model, std::shared_ptr<dist::ProcessGroup> group,
                          DdpOptions options = {});

  using DataParallelWrapper::train_step;
  LogVars train_step(const Batch& batch, OptimWrapper& optim_wrapper);
  void attach(OptimWrapper& wrapper) override;
  std::vector<const Reducer*> all_reducers() const override { return {reducer_.get()}; }
  Reducer& reducer() { return *reducer_; }
  [[nodiscard]] Reducer::NoSyncGuard no_sync() { return reducer_->no_sync(); }

 protected:
  std::vector<Reducer*> mutable_reducers() override { return {reducer_.get()}; }

 private:
  std::unique_ptr<Reducer> reducer_;
};

class SeparateDistributedDataParallel final : public DataParallelWrapper {
 public:
  SeparateDistributedDataParallel(std::shared_ptr<DataParallelModel> model,
                                  std::shared_ptr<dist::ProcessGroup> group, DdpOptions options = {});

  void attach(OptimWrapper& wrapper) override;
  std::vector<const Reducer*> all_reducers() const override;
  // The Reducer of one child ("generator", "discriminator"); throws naming it if absent.
  Reducer& reducer(const std::string& child);
  const std::map<std::string, std::unique_ptr<Reducer>>& reducers() const { return reducers_; }

 protected:
  std::vector<Reducer*> mutable_reducers() override;

 private:
  std::map<std::string, std::unique_ptr<Reducer>> reducers_;
};

}  // namespace tandem
