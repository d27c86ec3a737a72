#include "reducer/ddp.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "reducer/replica_sync.h"

namespace tandem {

Losses DataParallelModel::forward_losses(const Batch&) {
  TANDEM_FAIL(type_name() << " does not implement forward_losses (loss mode)");
}

Variable DataParallelModel::predict(const Batch&) {
  TANDEM_FAIL(type_name() << " does not implement predict (val/test mode)");
}

LogVars DataParallelModel::train_step(const Batch&, OptimWrapperDict&) {
  TANDEM_FAIL(type_name() << " does not implement train_step with an optimizer-wrapper dictionary");
}

std::pair<Variable, LogVars> parse_losses(const Losses& losses) {
  Variable total;
  LogVars log;
  for (const auto& [name, value] : losses) {
    Variable v = value.numel() == 1 ? value : mean(value);
    log[name] = v.item();
    if (name.find("loss") == std::string::npos) continue;
    total = total.defined() ? add(total, v) : v;
  }
  TANDEM_CHECK(total.defined(), "parse_losses: no entry has 'loss' in its name");
  log["loss"] = total.item();
  return {total, log};
}

DataParallelWrapper::DataParallelWrapper(std::shared_ptr<DataParallelModel> model,
                                         std::shared_ptr<dist::ProcessGroup> group, DdpOptions options,
                                         const char* wrapper_name)
    : model_(std::move(model)), group_(std::move(group)), options_(std::move(options)) {
  TANDEM_CHECK(model_ != nullptr, wrapper_name << ": no model");
  TANDEM_CHECK(group_ != nullptr, wrapper_name << ": no process group");
}

namespace {

// A wrapper over no parameter would synchronise nothing while the ranks drift apart.
void check_has_parameters(bool any, const nn::Module& model, const char* wrapper_name, const char* where) {
  if (any) return;
  const size_t registered = model.parameters().size();
  TANDEM_CHECK(registered > 0,
               wrapper_name << ": " << model.type_name() << " has no registered parameters" << where
                            << ", so nothing would be synchronised and the ranks would drift apart. Register "
                               "each layer with register_module(\"name\", layer) and each tensor with "
                               "register_parameter(\"name\", tensor): a member assigned without registering "
                               "is invisible to named_parameters() and to the wrapper");
  TANDEM_FAIL(wrapper_name << ": every parameter of " << model.type_name() << where << " is frozen ("
                           << registered
                           << " with requires_grad false), so there is nothing to synchronise: call "
                              "requires_grad_(true) on what should train before wrapping");
}

}  // namespace

ReducerOptions DataParallelWrapper::reducer_options(std::string name) const {
  ReducerOptions r = options_.reducer;
  r.name = std::move(name);
  return r;
}

void DataParallelWrapper::wrap_buffers() {
  auto named = model_->named_buffers();
  buffers_.clear();
  buffers_.reserve(named.size());
  for (auto& [name, t] : named) buffers_.push_back(t);
  std::vector<TensorDescription> descriptions;
  for (size_t i = 0; i < named.size(); ++i) descriptions.push_back({named[i].first, &buffers_[i]});
  verify_replicas(*group_, descriptions, "buffer");
  std::vector<Tensor*> pointers;
  for (Tensor& t : buffers_) pointers.push_back(&t);
  broadcast_from_rank0(*group_, pointers, "initial buffers", options_.reducer.broadcast_function);
}

void DataParallelWrapper::sync_buffers() {
  if (!options_.broadcast_buffers || group_->size() == 1) return;
  std::vector<Tensor*> pointers;
  for (Tensor& t : buffers_) pointers.push_back(&t);
  broadcast_from_rank0(*group_, pointers, "buffers before forward", options_.reducer.broadcast_function);
}

void DataParallelWrapper::check_replicas(const std::string& when) {
  ++checks_;
  std::vector<std::pair<std::string, Variable>> params = model_->named_parameters();
  std::vector<TensorDescription> tensors;
  for (auto& [name, p] : params) tensors.push_back({name, &p.data()});
  // Buffers agree only right after their broadcast: each rank's forward updates its own
  // running statistics from its own data. So broadcast them as the next forward would.
  std::vector<std::pair<std::string, Tensor>> buffers;
  if (options_.broadcast_buffers || group_->size() == 1) {
    sync_buffers();
    buffers = model_->named_buffers();  // what the model holds now, not the wrap-time handles
    for (auto& [name, b] : buffers) tensors.push_back({name, &b});
  }
  check_replicas_equal(*group_, tensors, when.empty() ? "at replica check " + std::to_string(checks_) : when);
}

void DataParallelWrapper::finish_train_step() {
  ++steps_;
  const int64_t every = options_.check_replicas_every;
  if (every <= 0 || steps_ % every != 0) return;
  check_replicas("after train_step " + std::to_string(steps_));
}

LogVars DataParallelWrapper::train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) {
  for (auto& [name, wrapper] : optim_wrappers.items()) attach(*wrapper);
  sync_buffers();
  LogVars log = model_->train_step(batch, optim_wrappers);
  finish_train_step();
  return log;
}

Variable DataParallelWrapper::val_step(const Batch& batch) {
  sync_buffers();
  NoGradGuard no_grad;
  return model_->predict(model_->preprocess(batch, false));
}

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<DataParallelModel> model,
                                                 std::shared_ptr<dist::ProcessGroup> group,
                                                 DdpOptions options)
    : DataParallelWrapper(std::move(model), std::move(group), std::move(options), "DistributedDataParallel") {
  std::vector<Variable> params;
  std::vector<std::string> names;
  for (auto& [name, p] : model_->named_parameters()) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  check_has_parameters(!params.empty(), *model_, "DistributedDataParallel", "");
  reducer_ = std::make_unique<Reducer>(params, names, group_, reducer_options(model_->type_name()));
  wrap_buffers();
}

void DistributedDataParallel::attach(OptimWrapper& wrapper) { wrapper.attach(reducer_.get()); }

LogVars DistributedDataParallel::train_step(const Batch& batch, OptimWrapper& optim_wrapper) {
  sync_buffers();
  Batch data = model_->preprocess(batch, true);
  attach(optim_wrapper);
  auto [total, log] = parse_losses(model_->forward_losses(data));
  optim_wrapper.update_params(total);
  finish_train_step();
  return log;
}

SeparateDistributedDataParallel::SeparateDistributedDataParallel(std::shared_ptr<DataParallelModel> model,
                                                                 std::shared_ptr<dist::ProcessGroup> group,
                                                                 DdpOptions options)
    : DataParallelWrapper(std::move(model), std::move(group), std::move(options),
                          "SeparateDistributedDataParallel") {
  // Each child gets a Reducer: a parameter of the model itself would belong to none.
  for (auto& [name, p] : model_->named_parameters()) {
    TANDEM_CHECK(name.find('.') != std::string::npos || !p.requires_grad(),
                 "SeparateDistributedDataParallel gives each child of "
                     << model_->type_name() << " its own Reducer, but parameter '" << name
                     << "' is registered on the model itself, in no child, and would never be synchronised: "
                        "register it in a child module, or wrap the model with DistributedDataParallel");
  }
  for (auto& [child_name, child] : model_->named_children()) {
    std::vector<Variable> params;
    std::vector<std::string> names;
    for (auto& [name, p] : child->named_parameters()) {
      if (!p.requires_grad()) continue;
      params.push_back(p);
      names.push_back(child_name + "." + name);
    }
    if (params.empty()) continue;
    reducers_[child_name] = std::make_unique<Reducer>(params, names, group_, reducer_options(child_name));
  }
  check_has_parameters(!reducers_.empty(), *model_, "SeparateDistributedDataParallel", " in its children");
  wrap_buffers();
}

void SeparateDistributedDataParallel::attach(OptimWrapper& wrapper) {
  for (auto& [child, reducer] : reducers_) wrapper.attach(reducer.get());
}

std::vector<const Reducer*> SeparateDistributedDataParallel::all_reducers() const {
  std::vector<const Reducer*> out;
  for (const auto& [child, reducer] : reducers_) out.push_back(reducer.get());
  return out;
}

std::vector<Reducer*> SeparateDistributedDataParallel::mutable_reducers() {
  std::vector<Reducer*> out;
  for (auto& [name, reducer] : reducers_) out.push_back(reducer.get());
  return out;
}

HookHandle DataParallelWrapper::register_comm_hook(std::shared_ptr<CommHook> hook) {
  TANDEM_CHECK(hook != nullptr, "register_comm_hook: null hook");
  std::vector<HookHandle> handles;
  for (Reducer* reducer : mutable_reducers()) handles.push_back(reducer->register_comm_hook(hook));
  return HookHandle(handles);
}

HookHandle DataParallelWrapper::register_pre_bucket_hook(PreBucketHook hook) {
  TANDEM_CHECK(hook != nullptr, "register_pre_bucket_hook: null hook");
  std::vector<HookHandle> handles;
  for (Reducer* reducer : mutable_reducers()) handles.push_back(reducer->register_pre_bucket_hook(hook));
  return HookHandle(handles);
}

Reducer& SeparateDistributedDataParallel::reducer(const std::string& child) {
  auto it = reducers_.find(child);
  TANDEM_CHECK(it != reducers_.end(),
               "SeparateDistributedDataParallel has no Reducer for child '" << child << "'");
  return *it->second;
}

}  // namespace tandem
