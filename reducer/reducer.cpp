#include "reducer/reducer.h"

#include <algorithm>

#include "autograd/optim.h"
#include "kernels/bucket_ops.h"
#include "reducer/replica_sync.h"
#include "runtime/step_capture.h"
#include "runtime/trace_summary.h"

namespace tandem {

namespace {

bool any_of(const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); }

BucketStoreOptions store_options(const ReducerOptions& options, int64_t agreement_size) {
  BucketCaps caps;
  caps.bucket_bytes = static_cast<size_t>(options.bucket_cap_mb * 1024 * 1024);
  caps.first_bucket_bytes =
      std::min(caps.bucket_bytes, static_cast<size_t>(options.first_bucket_cap_mb * 1024 * 1024));
  return {.name = options.name,
          .caps = caps,
          .gradient_as_bucket_view = options.gradient_as_bucket_view,
          .shared_memory = options.shared_memory_allreduce,
          .agreement_size = options.negotiate_grads ? agreement_size : 0};
}

}  // namespace

Reducer::Reducer(std::vector<Variable> params, std::vector<std::string> names,
                 std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(std::move(options)),
      agreement_(names_, options_.name, options_.allow_absent_ranks),
      steps_base_(optim::steps_taken_on_this_thread()) {
  TANDEM_CHECK(group_ != nullptr, "Reducer for " << options_.name << ": no process group");
  TANDEM_CHECK(params_.size() == names_.size(), "Reducer for " << options_.name << ": " << params_.size()
                                                               << " parameters but " << names_.size()
                                                               << " names");
  TANDEM_CHECK(
      options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
      "Reducer for " << options_.name << ": bucket_cap_mb must be positive, got " << options_.bucket_cap_mb);
  std::vector<TensorDescription> descriptions;
  std::vector<Tensor*> data;
  for (size_t i = 0; i < params_.size(); ++i) {
    TANDEM_CHECK(params_[i].defined() && params_[i].is_leaf(),
                 "Reducer for " << options_.name << ": '" << names_[i] << "' is not a leaf parameter");
    TANDEM_CHECK(index_of_.emplace(params_[i].impl(), i).second,
                 "Reducer for " << options_.name << ": parameter '" << names_[i] << "' is registered twice");
    descriptions.push_back({names_[i], &params_[i].data()});
    data.push_back(&params_[i].data());
  }
  claims_.claim(params_, names_, options_.name);
  verify_replicas(*group_, descriptions, "parameter");
  broadcast_from_rank0(*group_, data, "initial parameters of " + options_.name, options_.broadcast_function);
  std::shared_ptr<CommHook> default_hook;  // the plain allreduce, when it is the default
  if (!options_.reduce_function) default_hook = allreduce_hook();
  hooks_ = std::make_shared<ReducerHooks>(default_hook ? default_hook
                                                       : reduce_function_hook(options_.reduce_function));
  store_ = std::make_unique<BucketStore>(params_, names_, agreement_.parts(), *group_, default_hook,
                                         store_options(options_, agreement_.size()));
  warn_ignored_options();
  unsynced_used_.assign(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    hook_ids_.push_back(params_[i].add_grad_ready_hook([this, i](Variable& v) { mark_ready(i, &v.grad()); }));
  }
  Engine::add_observer(this);
}

Reducer::~Reducer() {
  Engine::remove_observer(this);
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_grad_ready_hook(hook_ids_[i]);
}

HookHandle Reducer::register_comm_hook(std::shared_ptr<CommHook> hook) {
  TANDEM_CHECK(hook != nullptr, "register_comm_hook: null hook for " << options_.name);
  return HookHandle(hooks_, hooks_->add_comm_hook(std::move(hook)));
}

HookHandle Reducer::register_pre_bucket_hook(PreBucketHook hook) {
  TANDEM_CHECK(hook != nullptr, "register_pre_bucket_hook: null hook for " << options_.name);
  return HookHandle(hooks_, hooks_->add_pre_bucket_hook(std::move(hook)));
}

void Reducer::warn_ignored_options() const {
  std::string ignored;
  if (options_.find_unused_parameters) ignored += "find_unused_parameters=true";
  if (options_.static_graph) ignored += std::string(ignored.empty() ? "" : " and ") + "static_graph=true";
  if (ignored.empty()) return;
  const bool both = options_.find_unused_parameters && options_.static_graph;
  write_stderr_line("tandem: warning: " + process_label() + "Reducer for " + options_.name + ": " + ignored +
                    (both ? " change" : " changes") +
                    " nothing: every backward is synchronised over the parameters it reaches "
                    "(found from its graph, as find_unused_parameters=true would, without a walk of its "
                    "own), with a bucket layout cached per used set (phase), after one small agreement "
                    "collective that catches ranks whose graphs differ. To drop that collective where "
                    "every backward reaches every parameter, set negotiate_grads=false");
}

std::vector<bool> Reducer::local_used(const std::vector<std::shared_ptr<VariableImpl>>& leaves) const {
  std::vector<bool> used(params_.size(), false);
  for (const auto& leaf : leaves) {
    if (auto it = index_of_.find(leaf.get()); it != index_of_.end()) used[it->second] = true;
  }
  return used;
}

void Reducer::on_backward_begin(const BackwardPass& pass) {
  ++backwards_seen_;
  if (StepCapture* capture = active_capture()) {  // each replay is this backward again
    capture->on_launch([this](bool advance) {
      if (advance) ++backwards_seen_;
    });
  }
  if (prepared_) {  // prepare_for_backward already agreed on this backward's set
    prepared_ = false;
    if (active_ != nullptr) contribute_unwritten(local_used(pass.reachable_leaves()));
    return;
  }
  std::vector<bool> local = local_used(pass.reachable_leaves());
  if (options_.detect_anomalous_params) detect_unreached(local, backwards_seen_);
  if (!sync_enabled_) {
    for (size_t i = 0; i < local.size(); ++i) unsynced_used_[i] = unsynced_used_[i] || local[i];
    return;
  }
  if (!any_of(local) && !any_of(unsynced_used_)) {  // this backward is not about our parameters
    ++backwards_unreaching_;
    return;
  }
  begin_sync(std::move(local), backwards_seen_);
}

void Reducer::contribute_unwritten(const std::vector<bool>& written) {
  // Prepared from the roots alone, the backward was then scoped to fewer parameters (given
  // inputs): no gradient will arrive for the rest, so they go as they are.
  for (size_t i : active_->used) {
    if (!slot_ready_[i] && !written[i])
      mark_ready(i, params_[i].grad().defined() ? &params_[i].grad() : nullptr);
  }
}

void Reducer::prepare_for_backward(const std::vector<Variable>& roots) {
  prepare_local(local_used(reachable_leaves(roots)));
}

void Reducer::prepare_for_backward(const std::vector<Variable>& roots, const std::vector<Variable>& inputs) {
  prepare_local(local_used(reachable_leaves(roots, inputs)));
}

void Reducer::prepare_local(std::vector<bool> local) {
  if (options_.detect_anomalous_params) detect_unreached(local, backwards_seen_ + 1);  // the next backward
  if (!sync_enabled_) {
    for (size_t i = 0; i < local.size(); ++i) unsynced_used_[i] = unsynced_used_[i] || local[i];
    return;
  }
  begin_sync(std::move(local), backwards_seen_ + 1);  // the next backward's position
  prepared_ = true;
}

void Reducer::begin_sync(std::vector<bool> local, int64_t backward) {
  TANDEM_CHECK(active_ == nullptr,
               "Reducer for " << options_.name << ": a backward began before the previous one finished");
  // `reachable`: gradients this backward will produce here. `local` adds the parameters
  // used by no_sync backwards since the last sync: their accumulated gradients are due too.
  const std::vector<bool> reachable = local;
  for (size_t i = 0; i < local.size(); ++i) local[i] = local[i] || unsynced_used_[i];
  unsynced_used_.assign(params_.size(), false);
  trace_.begin();
  if (StepCapture* capture = active_capture()) {
    begin_captured_sync(*capture, local, reachable);
    return;
  }
  if (!options_.negotiate_grads) {  // every parameter, no collective
    activate_phase(std::vector<bool>(params_.size(), true), reachable);
    return;
  }
  const int64_t steps = optim::steps_taken_on_this_thread() - steps_base_;
  const auto sum_counts = [this](Tensor& counts) { store_->sum_counts(counts); };
  std::vector<bool> global =
      agreement_.agree(*group_, sum_counts, local,
                       {.backward = backward, .steps = steps, .unreaching = backwards_unreaching_});
  const int64_t agreed_ns = trace_.now_ns();
  activate_phase(global, reachable);
  trace_.agreement(agreed_ns);  // after activation: the phase is known now
}

void Reducer::begin_captured_sync(StepCapture& capture, const std::vector<bool>& local,
                                  const std::vector<bool>& reachable) {
  // No agreement: its collective reads the device on the host, which a capture refuses,
  // and replays would not repeat it anyway. The captured backward must be a stable phase
  // that this rank's own used set names (see the contract).
  TANDEM_CHECK(local == reachable, "Reducer for "
                                       << options_.name
                                       << ": a backward captured into a CUDA graph cannot synchronise "
                                          "gradients accumulated under no_sync (accumulation)");
  TANDEM_CHECK(
      options_.non_finite == NonFinitePolicy::off,
      "Reducer for " << options_.name
                     << ": the non-finite gradient check reads the device on the host after every "
                        "backward, which a CUDA graph cannot replay; turn it off to capture the step");
  const std::vector<bool> global = options_.negotiate_grads ? local : std::vector<bool>(params_.size(), true);
  const Phase* found = store_->find(global);
  TANDEM_CHECK(
      found != nullptr && found->rebuilds > 0,
      "Reducer for " << options_.name << ": a backward captured into a CUDA graph reaches a set of "
                     << std::count(global.begin(), global.end(), true) << " parameters that has "
                     << (found == nullptr ? "no phase yet" : "a phase whose bucket layout is not rebuilt yet")
                     << "; run each step of the phase eagerly at least twice (the warm-up) before "
                        "capturing it, so that its layout is agreed and stable");
  activate_phase(global, reachable);
  capture.on_launch([this, global](bool advance) {
    if (!advance) return;
    ++synced_backwards_;
    Phase* phase = store_->find(global);
    if (phase == nullptr) return;
    ++phase->backwards;
    last_backward_bytes_ = phase->bytes;
    total_bytes_ += phase->bytes;
  });
}

void Reducer::activate_phase(const std::vector<bool>& global, const std::vector<bool>& reachable) {
  // Registrations and removals of hooks apply from this backward on.
  const std::shared_ptr<CommHook> hook = hooks_->comm_hook();
  Phase& phase = store_->open(global, hook);
  active_ = &phase;
  trace_.set_phase(phase.label);
  pre_bucket_ = hooks_->pre_bucket_hooks();
  prescale_ = hook->prescaled() ? 1.0 / group_->size() : 1.0;
  slot_ready_.assign(params_.size(), false);
  next_launch_ = 0;
  // No gradient will arrive here for these (used elsewhere, or only in earlier no_sync
  // backwards): this rank contributes what it has, zeros without a grad.
  for (size_t i : phase.used) {
    if (!reachable[i]) mark_ready(i, params_[i].grad().defined() ? &params_[i].grad() : nullptr);
  }
}

void Reducer::mark_ready(size_t index, const Tensor* grad) {
  if (active_ == nullptr) return;
  int b = active_->bucket_of[index];
  if (b < 0) return;
  TANDEM_CHECK(!slot_ready_[index],
               "gradient of '" << names_[index] << "' became ready twice in one backward");
  Bucket& bucket = active_->buckets[static_cast<size_t>(b)];
  Tensor& buffer = bucket.grad_bucket.buffer;
  const int64_t offset = active_->slot_offset[index];
  const bool is_slot = grad != nullptr && grad->defined() && grad->shares_storage_with(buffer) &&
                       grad->offset() == buffer.offset() + offset;
  if (!is_slot || prescale_ != 1.0) {  // one pass: copy (zeros without a grad) fused with the prescale
    const SyncTrace::Span span(trace_, trace::kPack, b);
    kernels::pack_(buffer, {grad != nullptr ? *grad : Tensor()}, {offset}, {params_[index].numel()},
                   prescale_);
  }
  slot_ready_[index] = true;
  active_->ready_order.push_back(index);
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  auto& buckets = active_->buckets;
  for (; next_launch_ < buckets.size() && buckets[next_launch_].pending == 0; ++next_launch_) {
    Bucket& b = buckets[next_launch_];
    const int k = static_cast<int>(next_launch_);
    b.grad_bucket.bytes_sent = 0;
    for (const PreBucketHook& hook : pre_bucket_) {
      // A handle: in-place changes reach the bucket, reassigning does not.
      Tensor flat = b.grad_bucket.buffer;
      hook(b.grad_bucket.index, flat);
    }
    const auto for_the_reduction = trace_.bucket_args(k);  // the reduction's spans carry them
    {
      const SyncTrace::Span span(trace_, trace::kLaunch, k);
      b.transport->launch(b);
    }
    trace_.count_in_flight(static_cast<int64_t>(b.grad_bucket.bytes_sent));
    b.transport->progress(b);
  }
}

void Reducer::on_backward_end(const BackwardPass& pass) {
  if (active_ == nullptr || prepared_) return;
  if (!pass.ok) {
    abandon_sync();
    return;
  }
  finish_sync();
}

void Reducer::abandon_sync() {
  // The backward threw. Launched reductions stay owned by their Work objects; the next
  // backward starts afresh (other ranks may then time out, naming the bucket).
  active_ = nullptr;
}

void Reducer::finish_sync() {
  // However this ends (done, or a throw from a wait or the finiteness check), the
  // backward is over: the next one starts afresh.
  struct EndOfSync {
    Phase*& active;
    ~EndOfSync() { active = nullptr; }
  } end_of_sync{active_};
  Phase& phase = *active_;
  for (size_t i : phase.used) {
    TANDEM_CHECK(slot_ready_[i], "Reducer for "
                                     << options_.name << ": parameter '" << names_[i]
                                     << "' was reached by the backward but its gradient never became ready");
  }
  size_t bytes = 0;
  for (size_t k = 0; k < phase.buckets.size(); ++k) {
    Bucket& b = phase.buckets[k];
    {
      const auto for_the_reduction = trace_.bucket_args(static_cast<int>(k));
      const SyncTrace::Span span(trace_, trace::kWait, static_cast<int>(k));
      b.transport->wait(b);
    }
    bytes += b.grad_bucket.bytes_sent;
    trace_.count_in_flight(-static_cast<int64_t>(b.grad_bucket.bytes_sent));
  }
  // The views and the finiteness check need the averages in the buckets; otherwise a
  // transport that unpacks puts them straight into the gradients below.
  const bool into_buffer = options_.gradient_as_bucket_view || options_.non_finite != NonFinitePolicy::off;
  for (size_t k = 0; k < phase.buckets.size() && into_buffer; ++k) {
    Bucket& b = phase.buckets[k];
    if (!b.transport->unpacks()) continue;
    const SyncTrace::Span span(trace_, trace::kUnpack, static_cast<int>(k));
    b.transport->unpack(b, nullptr);
  }
  if (options_.non_finite != NonFinitePolicy::off) check_finite(phase);
  for (size_t k = 0; k < phase.buckets.size(); ++k) {
    const SyncTrace::Span span(trace_, trace::kUnpack, static_cast<int>(k));
    write_averages(phase.buckets[k], into_buffer);
  }
  // A hook's scratch is the bucket's only memory outside the flat storage: it goes with the
  // sync, but a captured step's replays reuse it.
  if (active_capture() == nullptr) {
    for (Bucket& b : phase.buckets) b.grad_bucket.scratch = Tensor();
  }
  phase.bytes = bytes;
  ++phase.backwards;
  last_backward_bytes_ = bytes;
  total_bytes_ += bytes;
  ++synced_backwards_;
  trace_.end();
}

void Reducer::write_averages(Bucket& b, bool in_buffer) {
  if (options_.gradient_as_bucket_view) {
    // The gradients become views of this rank's buffer: once the transport lets go of it,
    // the caller may change them (zero_grad, clipping).
    b.transport->release(b);
    for (size_t k = 0; k < b.params.size(); ++k) {
      const size_t i = b.params[k];
      params_[i].set_grad(b.grad_bucket.buffer.view_range(b.offsets[k], params_[i].shape()));
    }
    return;
  }
  // Into the gradients (kept when they exist, so views stay valid): one unpack per bucket, a
  // single launch on a GPU, or the transport's own copy when the buffer lacks the averages.
  std::vector<Tensor> grads;
  for (size_t i : b.params) {
    if (!params_[i].grad().defined()) {
      params_[i].set_grad(Tensor::empty(params_[i].shape(), params_[i].dtype(), params_[i].device()));
    }
    grads.push_back(params_[i].grad());
  }
  if (b.transport->unpacks() && !in_buffer) {
    b.transport->unpack(b, &grads);
  } else {
    kernels::unpack_(b.grad_bucket.buffer, grads, b.offsets);
  }
}

}  // namespace tandem
