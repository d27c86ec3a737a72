#include "reducer/ddp.h"

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "reducer/replica_sync.h"

namespace tandem {

namespace {

ReducerOptions reducer_options(const DdpOptions& o, std::string name) {
  ReducerOptions r;
  r.bucket_cap_mb = o.bucket_cap_mb;
  r.gradient_as_bucket_view = o.gradient_as_bucket_view;
  r.find_unused_parameters = o.find_unused_parameters;
  r.static_graph = o.static_graph;
  r.non_finite = o.non_finite;
  r.name = std::move(name);
  return r;
}

// The check_replicas_every option: after every k-th train_step, parameters and buffers.
void maybe_check_replicas(DataParallelModel& model, dist::ProcessGroup& group, const DdpOptions& o, int64_t step) {
  if (o.check_replicas_every <= 0 || step % o.check_replicas_every != 0) return;
  std::vector<std::pair<std::string, Variable>> params = model.named_parameters();
  std::vector<std::pair<std::string, Tensor>> buffers = model.named_buffers();
  std::vector<TensorDescription> all;
  for (auto& [name, p] : params) all.push_back({name, &p.data()});
  for (auto& [name, b] : buffers) all.push_back({name, &b});
  check_replicas_equal(group, all, "after train_step " + std::to_string(step));
}

// Verifies the buffers across ranks, broadcasts them from rank 0 and returns handles.
std::vector<Tensor> wrap_buffers(nn::Module& model, dist::ProcessGroup& group) {
  std::vector<Tensor> handles;
  std::vector<TensorDescription> descriptions;
  auto named = model.named_buffers();
  handles.reserve(named.size());
  for (auto& [name, t] : named) handles.push_back(t);
  for (size_t i = 0; i < named.size(); ++i) descriptions.push_back({named[i].first, &handles[i]});
  verify_replicas(group, descriptions, "buffer");
  std::vector<Tensor*> pointers;
  for (Tensor& t : handles) pointers.push_back(&t);
  broadcast_from_rank0(group, pointers, "initial buffers");
  return handles;
}

void broadcast_buffers(std::vector<Tensor>& buffers, dist::ProcessGroup& group) {
  std::vector<Tensor*> pointers;
  for (Tensor& t : buffers) pointers.push_back(&t);
  broadcast_from_rank0(group, pointers, "buffers before forward");
}

}  // namespace

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

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<DataParallelModel> model,
                                                 std::shared_ptr<dist::ProcessGroup> group, DdpOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  TANDEM_CHECK(model_ != nullptr, "DistributedDataParallel: no model");
  std::vector<Variable> params;
  std::vector<std::string> names;
  for (auto& [name, p] : model_->named_parameters()) {
    if (!p.requires_grad()) continue;
    params.push_back(p);
    names.push_back(name);
  }
  reducer_ = std::make_unique<Reducer>(params, names, group_, reducer_options(options_, model_->type_name()));
  buffers_ = wrap_buffers(*model_, *group_);
}

void DistributedDataParallel::attach(OptimWrapper& wrapper) { wrapper.attach(reducer_.get()); }

void DistributedDataParallel::sync_buffers() {
  if (options_.broadcast_buffers && group_->size() > 1) broadcast_buffers(buffers_, *group_);
}

LogVars DistributedDataParallel::train_step(const Batch& batch, OptimWrapper& optim_wrapper) {
  sync_buffers();
  Batch data = model_->preprocess(batch, true);
  attach(optim_wrapper);
  auto [total, log] = parse_losses(model_->forward_losses(data));
  optim_wrapper.update_params(total);
  maybe_check_replicas(*model_, *group_, options_, ++steps_);
  return log;
}

LogVars DistributedDataParallel::train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) {
  for (auto& [name, wrapper] : optim_wrappers.items()) attach(*wrapper);
  sync_buffers();
  LogVars log = model_->train_step(batch, optim_wrappers);
  maybe_check_replicas(*model_, *group_, options_, ++steps_);
  return log;
}

Variable DistributedDataParallel::val_step(const Batch& batch) {
  sync_buffers();
  NoGradGuard no_grad;
  return model_->predict(model_->preprocess(batch, false));
}

SeparateDistributedDataParallel::SeparateDistributedDataParallel(std::shared_ptr<DataParallelModel> model,
                                                                 std::shared_ptr<dist::ProcessGroup> group,
                                                                 DdpOptions options)
    : model_(std::move(model)), group_(std::move(group)), options_(options) {
  TANDEM_CHECK(model_ != nullptr, "SeparateDistributedDataParallel: no model");
  for (auto& [child_name, child] : model_->named_children()) {
    std::vector<Variable> params;
    std::vector<std::string> names;
    for (auto& [name, p] : child->named_parameters()) {
      if (!p.requires_grad()) continue;
      params.push_back(p);
      names.push_back(child_name + "." + name);
    }
    if (params.empty()) continue;
    reducers_[child_name] = std::make_unique<Reducer>(params, names, group_, reducer_options(options_, child_name));
  }
  buffers_ = wrap_buffers(*model_, *group_);
}

Reducer& SeparateDistributedDataParallel::reducer(const std::string& child) {
  auto it = reducers_.find(child);
  TANDEM_CHECK(it != reducers_.end(), "SeparateDistributedDataParallel has no Reducer for child '" << child << "'");
  return *it->second;
}

void SeparateDistributedDataParallel::sync_buffers() {
  if (options_.broadcast_buffers && group_->size() > 1) broadcast_buffers(buffers_, *group_);
}

LogVars SeparateDistributedDataParallel::train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) {
  for (auto& [name, wrapper] : optim_wrappers.items()) {
    for (auto& [child, reducer] : reducers_) wrapper->attach(reducer.get());
  }
  sync_buffers();
  LogVars log = model_->train_step(batch, optim_wrappers);
  maybe_check_replicas(*model_, *group_, options_, ++steps_);
  return log;
}

Variable SeparateDistributedDataParallel::val_step(const Batch& batch) {
  sync_buffers();
  NoGradGuard no_grad;
  return model_->predict(model_->preprocess(batch, false));
}

}  // namespace tandem
