#include "reducer/reducer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "autograd/optim.h"
#include "kernels/bucket_ops.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"
#include "reducer/replica_sync.h"
#include "runtime/cpu_memory.h"
#include "runtime/step_capture.h"
#include "runtime/trace_summary.h"

namespace tandem {

namespace {

bool any_of(const std::vector<bool>& v) { return std::find(v.begin(), v.end(), true) != v.end(); }

// One reduction on the tensor's device: x * 0 is 0 for finite x and NaN for NaN/Inf, so
// the sum is finite exactly when every element is.
bool all_finite(const Tensor& t) { return std::isfinite(kernels::sum_all(kernels::scale(t, 0.0)).item()); }

// The trace span of a shared bucket's reduction (a collective's span, like "allreduce (sum)").
constexpr const char* kSharedReduce = "shared-memory allreduce (sum)";

// Numbers the synced backwards of every Reducer of the process, for the trace.
std::atomic<int64_t> g_trace_syncs{0};

// TANDEM_SHARED_MEMORY_ALLREDUCE=0 turns the shared-memory buckets off (any other value,
// or none, leaves ReducerOptions::shared_memory_allreduce in charge).
bool shared_memory_allowed_by_env() {
  const char* value = std::getenv("TANDEM_SHARED_MEMORY_ALLREDUCE");
  return value == nullptr || std::string(value) != "0";
}

// Positions are compared modulo this, so that the sums of squares cannot overflow.
constexpr int64_t kPositionModulus = int64_t{1} << 20;

// The sums over ranks of x and of x^2 describe equal x on every rank exactly when
// (sum x)^2 == world * sum x^2 (Cauchy-Schwarz holds with equality only for equal values).
bool all_equal(int64_t sum, int64_t sum_of_squares, int world) {
  return static_cast<__int128>(sum) * sum == static_cast<__int128>(world) * sum_of_squares;
}

std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// The name of the Reducer watching each claimed parameter. Ranks run as threads in the
// unit tests, so the map is shared by threads. Never destroyed: a Reducer that outlives
// static destruction (held by a static) must still find it.
struct Claims {
  std::mutex mutex;
  std::unordered_map<const VariableImpl*, std::string> owner;
};
Claims& claims() {
  static Claims* all = new Claims;
  return *all;
}

}  // namespace

void Reducer::ParameterClaims::claim(const std::vector<Variable>& params,
                                     const std::vector<std::string>& names, const std::string& owner) {
  Claims& all = claims();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = all.owner.find(params[i].impl());
    TANDEM_CHECK(
        it == all.owner.end(),
        "Reducer for " << owner << ": parameter '" << names[i]
                       << "' is already synchronised by the Reducer for " << it->second
                       << ": wrap a model once (destroy the first wrapper before wrapping it again), and "
                          "give each parameter to one Reducer");
  }
  for (const Variable& p : params) {
    all.owner.emplace(p.impl(), owner);
    held_.push_back(p.impl());
  }
}

Reducer::ParameterClaims::~ParameterClaims() {
  Claims& all = claims();
  std::lock_guard<std::mutex> lock(all.mutex);
  for (const VariableImpl* p : held_) all.owner.erase(p);
}

Reducer::Reducer(std::vector<Variable> params, std::vector<std::string> names,
                 std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(std::move(options)),
      steps_base_(optim::steps_taken_on_this_thread()) {
  TANDEM_CHECK(group_ != nullptr, "Reducer for " << options_.name << ": no process group");
  TANDEM_CHECK(params_.size() == names_.size(), "Reducer for " << options_.name << ": " << params_.size()
                                                               << " parameters but " << names_.size()
                                                               << " names");
  TANDEM_CHECK(
      options_.bucket_cap_mb > 0 && options_.first_bucket_cap_mb > 0,
      "Reducer for " << options_.name << ": bucket_cap_mb must be positive, got " << options_.bucket_cap_mb);
  TANDEM_CHECK(options_.phase_cache_mb >= 0,  // false for NaN too
               "Reducer for " << options_.name
                              << ": phase_cache_mb must be 0 (twice the parameters' bytes) or positive, got "
                              << options_.phase_cache_mb);
  std::vector<TensorDescription> descriptions;
  std::vector<Tensor*> data;
  for (size_t i = 0; i < params_.size(); ++i) {
    TANDEM_CHECK(params_[i].defined() && params_[i].is_leaf(),
                 "Reducer for " << options_.name << ": '" << names_[i] << "' is not a leaf parameter");
    TANDEM_CHECK(index_of_.emplace(params_[i].impl(), i).second,
                 "Reducer for " << options_.name << ": parameter '" << names_[i] << "' is registered twice");
    descriptions.push_back({names_[i], &params_[i].data()});
    data.push_back(&params_[i].data());
    std::string part =
        names_[i].find('.') == std::string::npos ? "" : names_[i].substr(0, names_[i].find('.'));
    auto it = std::find(parts_.begin(), parts_.end(), part);
    part_index_.push_back(static_cast<size_t>(it - parts_.begin()));
    if (it == parts_.end()) parts_.push_back(part);
  }
  if (options_.phase_cache_mb == 0) {
    for (const Variable& p : params_) phase_cache_bytes_ += 4 * p.data().bytes();
  } else {
    const double bytes = options_.phase_cache_mb * 1024 * 1024;
    constexpr size_t kUnbounded = std::numeric_limits<size_t>::max();
    phase_cache_bytes_ = bytes >= static_cast<double>(kUnbounded) ? kUnbounded : static_cast<size_t>(bytes);
  }
  claims_.claim(params_, names_, options_.name);
  verify_replicas(*group_, descriptions, "parameter");
  broadcast_from_rank0(*group_, data, "initial parameters of " + options_.name, options_.broadcast_function);
  if (!options_.reduce_function) default_hook_ = allreduce_hook();
  hooks_ = std::make_shared<ReducerHooks>(default_hook_ ? default_hook_
                                                        : reduce_function_hook(options_.reduce_function));
  shared_wanted_ = options_.shared_memory_allreduce && shared_memory_allowed_by_env() &&
                   group_->backend() == dist::Backend::mpi && group_->size() > 1;
  for (const Variable& p : params_) {
    shared_wanted_ = shared_wanted_ && p.device().is_cpu() && p.dtype() == DType::f32;
  }
  if (shared_wanted_ && options_.negotiate_grads) {
    agreement_shared_ =
        dist::SharedBuffers::create(*group_, static_cast<int64_t>(agreement_size()),
                                    "used-parameter agreement of " + options_.name, DType::i64);
    shared_wanted_ = agreement_shared_ != nullptr;  // the same on every rank
  }
  hook_ = hooks_->comm_hook();
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

std::string Reducer::part_of(size_t index) const {
  const std::string& p = parts_[part_index_[index]];
  return p.empty() ? "(top level)" : p;
}

std::vector<bool> Reducer::local_used(const std::vector<std::shared_ptr<VariableImpl>>& leaves) const {
  std::vector<bool> used(params_.size(), false);
  for (const auto& leaf : leaves) {
    if (auto it = index_of_.find(leaf.get()); it != index_of_.end()) used[it->second] = true;
  }
  return used;
}

void Reducer::detect_unreached(const std::vector<bool>& local, int64_t backward) {
  std::vector<bool> part_reached(parts_.size(), false), unreached(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (local[i]) part_reached[part_index_[i]] = true;
  }
  if (!any_of(part_reached)) return;  // this backward is not about our parameters
  unreached_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (local[i] || !part_reached[part_index_[i]] || !params_[i].requires_grad()) continue;
    unreached[i] = true;
    unreached_.push_back(names_[i]);
  }
  if (unreached_.empty() || !unreached_warned_.insert(unreached).second) return;
  std::ostringstream line;
  line << "tandem: warning: " << process_label() << "detect_anomalous_params: backward " << backward << " of "
       << options_.name << " did not reach " << plural(static_cast<int64_t>(unreached_.size()), "parameter")
       << " that require grad, in the parts it reached:";
  const char* separator = " ";
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!unreached[i]) continue;
    line << separator << "'" << names_[i] << "' " << shape_str(params_[i].data().shape());
    separator = ", ";
  }
  line << " (each set is reported once)";
  write_stderr_line(line.str());
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
    return;
  }
  std::vector<bool> local = local_used(pass.reachable_leaves());
  if (options_.detect_anomalous_params) detect_unreached(local, backwards_seen_);
  if (!sync_enabled_) {
    for (size_t i = 0; i < local.size(); ++i) unsynced_used_[i] = unsynced_used_[i] || local[i];
    return;
  }
  if (!any_of(local) && !any_of(unsynced_used_)) return;  // this backward is not about our parameters
  begin_sync(std::move(local), backwards_seen_);
}

void Reducer::prepare_for_backward(const std::vector<Variable>& roots) {
  std::vector<bool> local = local_used(reachable_leaves(roots));
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
  const bool traced = trace::enabled();
  trace_sync_ = traced ? ++g_trace_syncs : -1;
  trace_sync_start_ns_ = traced ? trace::now_ns() : 0;
  if (StepCapture* capture = active_capture()) {
    begin_captured_sync(*capture, local, reachable);
    return;
  }
  if (!options_.negotiate_grads) {  // every parameter, no collective
    activate_phase(std::vector<bool>(params_.size(), true), reachable);
    return;
  }
  std::vector<bool> global = agree_on_used_set(local, backward);
  const int64_t agreed_ns = traced ? trace::now_ns() : 0;
  activate_phase(global, reachable);
  if (traced) {  // after activation: the phase is known now
    trace::Event agreement{.category = "reducer",
                           .name = trace::kAgreement,
                           .ts_ns = trace_sync_start_ns_,
                           .dur_ns = agreed_ns - trace_sync_start_ns_,
                           .args = trace_args(-1)};
    trace::record(std::move(agreement));
  }
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
  auto found = phases_.find(global);
  TANDEM_CHECK(found != phases_.end() && found->second.rebuilds > 0,
               "Reducer for " << options_.name << ": a backward captured into a CUDA graph reaches a set of "
                              << std::count(global.begin(), global.end(), true) << " parameters that has "
                              << (found == phases_.end() ? "no phase yet"
                                                         : "a phase whose bucket layout is not rebuilt yet")
                              << "; run each step of the phase eagerly at least twice (the warm-up) before "
                                 "capturing it, so that its layout is agreed and stable");
  activate_phase(global, reachable);
  capture.on_launch([this, global](bool advance) {
    if (!advance) return;
    ++synced_backwards_;
    auto it = phases_.find(global);
    if (it == phases_.end()) return;
    ++it->second.backwards;
    last_backward_bytes_ = it->second.bytes;
    total_bytes_ += it->second.bytes;
  });
}

std::vector<trace::Arg> Reducer::trace_args(int bucket) const {
  std::vector<trace::Arg> args = {trace::arg("sync", trace_sync_), trace::arg("phase", active_->label)};
  if (bucket >= 0) args.push_back(trace::arg("bucket", bucket));
  return args;
}

std::vector<bool> Reducer::agree_on_used_set(const std::vector<bool>& local, int64_t backward) {
  const size_t count = params_.size();
  const int64_t steps = optim::steps_taken_on_this_thread() - steps_base_;
  // One small collective: per parameter, then per part, how many ranks used it; how many
  // ranks used any; then this rank's position (backward and step counts) and its square,
  // to check that ranks agree.
  const size_t reaching = count + parts_.size(), position = reaching + 1;
  Tensor counts = Tensor::zeros({static_cast<int64_t>(agreement_size())}, DType::i64);
  int64_t* c = counts.data<int64_t>();
  for (size_t i = 0; i < count; ++i) {
    if (local[i]) {
      c[i] = 1;
      c[count + part_index_[i]] = 1;
      c[reaching] = 1;
    }
  }
  const int64_t b = backward % kPositionModulus, s = steps % kPositionModulus;
  c[position] = b;
  c[position + 1] = b * b;
  c[position + 2] = s;
  c[position + 3] = s * s;
  if (agreement_shared_) {  // the same sum, without MPI's copies and the communication thread
    dist::SharedBuffers& shared = *agreement_shared_;
    shared.begin(++agreement_epoch_);
    std::memcpy(shared.local().data<int64_t>(), c, counts.bytes());
    shared.publish(agreement_epoch_);
    shared.wait_published(agreement_epoch_);
    shared.sum_range(0, counts.numel(), c);
    shared.end(agreement_epoch_);
  } else {
    dist::allreduce_host(*group_, counts, dist::ReduceOp::sum,
                         "used-parameter agreement of " + options_.name);
  }
  ++agreements_;
  const int world = group_->size();
  if (!all_equal(c[position], c[position + 1], world) ||
      !all_equal(c[position + 2], c[position + 3], world)) {
    fail_out_of_step(backward, steps);
  }
  // A rank that reaches none of the parameters (its backward is about something else, and
  // it agreed through prepare_for_backward) contributes zeros; among the ranks that reach
  // some, each part is reached by all or by none.
  const int64_t ranks_reaching = c[reaching];
  for (size_t k = 0; k < parts_.size() && !options_.allow_absent_ranks; ++k) {
    const int64_t ranks = c[count + k];
    if (ranks > 0 && ranks < ranks_reaching) {
      size_t first = 0;
      while (part_index_[first] != k) ++first;
      bool here = false;
      for (size_t i = 0; i < count; ++i) here = here || (local[i] && part_index_[i] == k);
      TANDEM_FAIL("ranks diverge in "
                  << options_.name << ": this backward reaches part '" << part_of(first)
                  << "' (first parameter '" << names_[first] << "') on " << ranks << " of " << ranks_reaching
                  << " ranks" << (ranks_reaching < world ? " whose backwards reach the model" : "") << ", "
                  << (here ? "including" : "not including")
                  << " this one; every rank must run the same backward (the same step) in "
                  << "the same order. If this part is meant to be used on some ranks only (a graph that "
                  << "depends on the rank's data), set ReducerOptions::allow_absent_ranks "
                  << "(DdpOptions::reducer.allow_absent_ranks) to average it with zeros from the "
                  << "ranks that do not use it");
    }
  }
  std::vector<bool> global(count);
  for (size_t i = 0; i < count; ++i) global[i] = c[i] > 0;
  return global;
}

void Reducer::fail_out_of_step(int64_t backward, int64_t steps) {
  // Every rank found the mismatch in the same collective, so every rank is here: one more
  // collective gathers the positions for the message.
  const int world = group_->size();
  Tensor all = Tensor::zeros({2 * static_cast<int64_t>(world)}, DType::i64);
  int64_t* p = all.data<int64_t>();
  p[2 * group_->rank()] = backward;
  p[2 * group_->rank() + 1] = steps;
  dist::allreduce_host(*group_, all, dist::ReduceOp::sum, "positions of the ranks of " + options_.name);
  std::ostringstream ranks;
  constexpr int kListed = 8;
  for (int r = 0; r < world && r < kListed; ++r) {
    ranks << (r ? "; " : "") << "rank " << r << ": backward " << p[2 * r] << " after "
          << plural(p[2 * r + 1], "optimizer step");
  }
  if (world > kListed) ranks << "; ...";
  TANDEM_FAIL("ranks diverge in "
              << options_.name << ": the ranks are at different backwards or optimizer steps (" << ranks.str()
              << "; this is rank " << group_->rank() << ", counting since the Reducer was made). A rank "
              << "ran a backward or a step that the others did not, or its backward reached none of "
              << options_.name << "'s parameters while theirs did; averaging now would mix gradients "
              << "of different iterations. Every rank must run the same backwards and steps in the "
              << "same order; where some ranks' backwards may reach none of the parameters, call "
              << "prepare_for_backward(loss) before every backward on every rank");
}

void Reducer::activate_phase(const std::vector<bool>& global, const std::vector<bool>& reachable) {
  Phase& phase = phase_for(global);
  maybe_rebuild(phase);
  active_ = &phase;
  hook_ = hooks_->comm_hook();  // registrations and removals apply from this backward on
  pre_bucket_ = hooks_->pre_bucket_hooks();
  prescale_ = hook_->prescaled() ? 1.0 / group_->size() : 1.0;
  shared_sync_ = hook_ == default_hook_;
  slot_ready_.assign(params_.size(), false);
  next_launch_ = 0;
  phase.ready_order.clear();
  for (Bucket& b : phase.buckets) {
    b.pending = b.params.size();
    b.work = nullptr;
    b.reduced = false;
    if (b.shared && shared_sync_) b.shared->begin(++b.epoch);  // before anything is packed into it
  }
  // No gradient will arrive here for these (used elsewhere, or only in earlier no_sync
  // backwards): this rank contributes what it has, zeros without a grad.
  for (size_t i : phase.used) {
    if (!reachable[i]) mark_ready(i, params_[i].grad().defined() ? &params_[i].grad() : nullptr);
  }
}

Reducer::Phase& Reducer::phase_for(const std::vector<bool>& global) {
  auto it = phases_.find(global);
  if (it != phases_.end()) {
    it->second.last_used = ++use_clock_;
    return it->second;
  }
  size_t incoming = 0;  // what the new phase's buckets will hold
  for (size_t i = 0; i < global.size(); ++i) {
    if (global[i]) incoming += params_[i].data().bytes();
  }
  make_room(incoming);
  Phase& phase = phases_[global];
  phase.id = next_phase_id_++;
  phase.last_used = ++use_clock_;
  std::vector<std::string> parts;
  for (size_t i = 0; i < global.size(); ++i) {
    if (!global[i]) continue;
    phase.used.push_back(i);
    if (std::find(parts.begin(), parts.end(), part_of(i)) == parts.end()) parts.push_back(part_of(i));
  }
  // Names the parameter set, not the phase's id: a phase evicted and rebuilt (a dynamic
  // model's) keeps its label, so a trace summary adds up all its backwards.
  phase.label = options_.name + ": " + std::to_string(phase.used.size()) + " of " +
                std::to_string(params_.size()) + " parameters (";
  for (size_t k = 0; k < parts.size(); ++k) phase.label += (k ? ", " : "") + parts[k];
  phase.label += ")";
  std::vector<size_t> order(phase.used.rbegin(), phase.used.rend());  // gradients arrive roughly in reverse
  build_layout(phase, order);
  return phase;
}

void Reducer::make_room(size_t incoming) {
  // Called between backwards only (begin_sync checks), so no phase is in flight and any
  // may go. The order of agreed sets is the same on every rank, hence so are evictions.
  TANDEM_CHECK(active_ == nullptr, "internal: phase eviction during a backward of " << options_.name);
  size_t held = cached_bucket_bytes();
  while (!phases_.empty() && held + incoming > phase_cache_bytes_) {
    auto oldest = phases_.begin();
    for (auto it = phases_.begin(); it != phases_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    for (const Bucket& b : oldest->second.buckets) held -= b.held_bytes();
    CpuCacheBypass to_malloc;  // its sizes may never come again: let malloc reuse them for any size
    phases_.erase(oldest);
    ++evicted_phases_;
  }
}

size_t Reducer::cached_bucket_bytes() const {
  size_t bytes = 0;
  for (const auto& [key, phase] : phases_) {
    for (const Bucket& b : phase.buckets) bytes += b.held_bytes();
  }
  return bytes;
}

void Reducer::build_layout(Phase& phase, const std::vector<size_t>& order) {
  std::vector<BucketParamInfo> infos;
  for (const Variable& p : params_) infos.push_back({p.numel(), p.dtype(), p.device()});
  BucketCaps caps;
  caps.bucket_bytes = static_cast<size_t>(options_.bucket_cap_mb * 1024 * 1024);
  caps.first_bucket_bytes =
      std::min(caps.bucket_bytes, static_cast<size_t>(options_.first_bucket_cap_mb * 1024 * 1024));
  std::vector<std::vector<size_t>> assignment = assign_buckets(infos, order, caps);

  {
    CpuCacheBypass to_malloc;  // a rebuild splits the same bytes otherwise: the old sizes rarely come back
    phase.buckets.clear();
  }
  phase.bucket_of.assign(params_.size(), -1);
  phase.slot_offset.assign(params_.size(), 0);
  for (size_t b = 0; b < assignment.size(); ++b) {
    Bucket bucket;
    bucket.params = assignment[b];
    int64_t total = 0;
    std::string names;
    for (size_t i : bucket.params) {
      bucket.offsets.push_back(total);
      phase.bucket_of[i] = static_cast<int>(b);
      phase.slot_offset[i] = total;
      total += params_[i].numel();
      bucket.grad_bucket.param_names.push_back(names_[i]);
      if (names.size() < 120) names += (names.empty() ? "" : ", ") + names_[i];
    }
    if (bucket.params.size() > 0 && names.size() >= 120) names += ", ...";
    const Variable& first = params_[bucket.params.front()];
    bucket.grad_bucket.index = b;
    bucket.grad_bucket.tag = "bucket " + std::to_string(b) + " of phase " + std::to_string(phase.id) +
                             " of " + options_.name + " (" + names + ")";
    if (shared_wanted_) {
      bucket.shared = dist::SharedBuffers::create(*group_, total, bucket.grad_bucket.tag);
      shared_wanted_ = bucket.shared != nullptr;  // the same on every rank
    }
    bucket.grad_bucket.buffer =
        bucket.shared ? bucket.shared->local() : Tensor::zeros({total}, first.dtype(), first.device());
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const size_t i = bucket.params[k];
      bucket.grad_bucket.param_views.push_back(
          bucket.grad_bucket.buffer.view_range(bucket.offsets[k], params_[i].shape()));
    }
    bucket.grad_bucket.group = group_.get();
    phase.buckets.push_back(std::move(bucket));
  }
}

void Reducer::maybe_rebuild(Phase& phase) {
  if (phase.rebuilds > 0 || phase.backwards != 1) return;
  // Rank 0's observed ready order of the first backward becomes everyone's layout order.
  Tensor order = Tensor::zeros({static_cast<int64_t>(phase.used.size())}, DType::i64);
  int64_t* o = order.data<int64_t>();
  TANDEM_CHECK(phase.ready_order.size() == phase.used.size(),
               "internal: phase " << phase.id << " of " << options_.name << " recorded "
                                  << phase.ready_order.size() << " ready gradients for " << phase.used.size()
                                  << " parameters");
  for (size_t k = 0; k < phase.used.size(); ++k) o[k] = static_cast<int64_t>(phase.ready_order[k]);
  dist::broadcast_host(*group_, order, 0,
                       "bucket rebuild order of phase " + std::to_string(phase.id) + " of " + options_.name);
  std::vector<size_t> rank0_order;
  for (size_t k = 0; k < phase.used.size(); ++k) rank0_order.push_back(static_cast<size_t>(o[k]));
  build_layout(phase, rank0_order);
  phase.rebuilds = 1;
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
    trace::Span span("reducer", trace::kPack);
    if (span.on() && trace_sync_ >= 0) span.set_args(trace_args(b));
    kernels::pack_(buffer, {grad != nullptr ? *grad : Tensor()}, {offset}, {params_[index].numel()},
                   prescale_);
  }
  slot_ready_[index] = true;
  active_->ready_order.push_back(index);
  if (--bucket.pending == 0) launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  auto& buckets = active_->buckets;
  while (next_launch_ < buckets.size() && buckets[next_launch_].pending == 0) {
    Bucket& b = buckets[next_launch_];
    b.grad_bucket.bytes_sent = 0;
    for (const PreBucketHook& hook : pre_bucket_) {
      Tensor flat =
          b.grad_bucket.buffer;  // a handle: in-place changes reach the bucket, reassigning does not
      hook(b.grad_bucket.index, flat);
    }
    if (b.shared && shared_sync_) {
      launch_shared(b, next_launch_);
    } else if (trace_sync_ >= 0 && trace::enabled()) {
      const int64_t start_ns = trace::now_ns();
      std::vector<trace::Arg> args = trace_args(static_cast<int>(next_launch_));
      {
        trace::ScopedArgs for_the_collective(args);  // the reduction's span carries them
        b.work = hook_->launch(b.grad_bucket);
      }
      trace::complete("reducer", trace::kLaunch, start_ns, std::move(args));
      bytes_in_flight_ += static_cast<int64_t>(b.grad_bucket.bytes_sent);
      trace::counter("bytes in flight", static_cast<double>(bytes_in_flight_));
    } else {
      b.work = hook_->launch(b.grad_bucket);
    }
    ++next_launch_;
  }
}

void Reducer::launch_shared(Bucket& b, size_t k) {
  b.grad_bucket.bytes_sent = b.grad_bucket.buffer.bytes();
  const bool traced = trace_sync_ >= 0 && trace::enabled();
  const int64_t start_ns = traced ? trace::now_ns() : 0;
  b.shared->publish(b.epoch);
  if (traced) {
    trace::complete("reducer", trace::kLaunch, start_ns, trace_args(static_cast<int>(k)));
    bytes_in_flight_ += static_cast<int64_t>(b.grad_bucket.bytes_sent);
    trace::counter("bytes in flight", static_cast<double>(bytes_in_flight_));
  }
  // Reduced now when every rank has published it already, strictly in bucket order.
  const std::vector<Bucket>& buckets = active_->buckets;
  if (k > 0 && !(buckets[k - 1].reduced || !buckets[k - 1].shared)) return;
  const int64_t reduce_ns = traced ? trace::now_ns() : 0;
  b.reduced = b.shared->try_reduce(b.epoch);
  if (traced && b.reduced) trace::complete("comm", kSharedReduce, reduce_ns, trace_args(static_cast<int>(k)));
}

void Reducer::reduce_shared(Bucket& b, size_t k) {
  if (b.reduced) return;
  const bool traced = trace_sync_ >= 0 && trace::enabled();
  const int64_t start_ns = traced ? trace::now_ns() : 0;
  b.shared->reduce(b.epoch);
  b.reduced = true;
  if (traced) trace::complete("comm", kSharedReduce, start_ns, trace_args(static_cast<int>(k)));
}

void Reducer::gather_shared(Bucket& b, bool into_buffer) {
  dist::SharedBuffers& shared = *b.shared;
  float* own = b.grad_bucket.buffer.data<float>();
  std::vector<float*> grads;
  if (!into_buffer) {
    for (size_t i : b.params) {
      if (!params_[i].grad().defined()) {
        params_[i].set_grad(Tensor::empty(params_[i].shape(), params_[i].dtype(), params_[i].device()));
      }
      grads.push_back(params_[i].grad().data<float>());
    }
  }
  for (int q = 0; q < shared.size(); ++q) {
    const auto [lo, hi] = shared.slice(q);
    if (lo == hi) continue;
    const float* source = q == shared.rank() ? own + lo : shared.reduced_slice(q, b.epoch);
    if (into_buffer) {
      if (q != shared.rank()) std::memcpy(own + lo, source, static_cast<size_t>(hi - lo) * sizeof(float));
      continue;
    }
    for (size_t k = 0; k < b.params.size(); ++k) {  // the part of each gradient in this slice
      const int64_t first = b.offsets[k], last = first + params_[b.params[k]].numel();
      const int64_t from = std::max(lo, first), to = std::min(hi, last);
      if (from >= to) continue;
      std::memmove(grads[k] + (from - first), source + (from - lo),
                   static_cast<size_t>(to - from) * sizeof(float));
    }
  }
  shared.end(b.epoch);
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
  const bool traced = trace_sync_ >= 0 && trace::enabled();
  size_t bytes = 0;
  for (size_t k = 0; k < phase.buckets.size(); ++k) {
    Bucket& b = phase.buckets[k];
    const int64_t start_ns = traced ? trace::now_ns() : 0;
    if (b.shared && shared_sync_) {
      reduce_shared(b, k);
    } else if (b.work) {
      b.work->wait();
    }
    hook_->finish(b.grad_bucket);
    bytes += b.grad_bucket.bytes_sent;
    if (traced) {
      trace::complete("reducer", trace::kWait, start_ns, trace_args(static_cast<int>(k)));
      bytes_in_flight_ -= static_cast<int64_t>(b.grad_bucket.bytes_sent);
      trace::counter("bytes in flight", static_cast<double>(bytes_in_flight_));
    }
  }
  // Shared buckets: each rank reduced one slice. The views and the finiteness check need
  // every slice in the bucket; otherwise the slices go straight into the gradients below.
  const bool into_buffer = options_.gradient_as_bucket_view || options_.non_finite != NonFinitePolicy::off;
  for (size_t k = 0; k < phase.buckets.size() && into_buffer && shared_sync_; ++k) {
    if (!phase.buckets[k].shared) continue;
    trace::Span span("reducer", trace::kUnpack);
    if (span.on() && traced) span.set_args(trace_args(static_cast<int>(k)));
    gather_shared(phase.buckets[k], /*into_buffer=*/true);
  }
  if (options_.non_finite != NonFinitePolicy::off) check_finite(phase);
  for (size_t k = 0; k < phase.buckets.size(); ++k) {
    Bucket& b = phase.buckets[k];
    trace::Span span("reducer", trace::kUnpack);
    if (span.on() && traced) span.set_args(trace_args(static_cast<int>(k)));
    if (b.shared && shared_sync_ && !into_buffer) {
      gather_shared(b, /*into_buffer=*/false);
      continue;
    }
    if (options_.gradient_as_bucket_view) {
      // The gradients become views of this rank's buffer: once every rank has read it, the
      // caller may change them (zero_grad, clipping).
      if (b.shared && shared_sync_) b.shared->wait_finished(b.epoch);
      for (size_t k = 0; k < b.params.size(); ++k) {
        size_t i = b.params[k];
        params_[i].set_grad(b.grad_bucket.buffer.view_range(b.offsets[k], params_[i].shape()));
      }
      continue;
    }
    // Averages back into the gradients (kept when they exist, so views stay valid): one
    // unpack per bucket, a single launch on a GPU.
    std::vector<Tensor> grads;
    for (size_t i : b.params) {
      if (!params_[i].grad().defined()) {
        params_[i].set_grad(Tensor::empty(params_[i].shape(), params_[i].dtype(), params_[i].device()));
      }
      grads.push_back(params_[i].grad());
    }
    kernels::unpack_(b.grad_bucket.buffer, grads, b.offsets);
  }
  phase.bytes = bytes;
  ++phase.backwards;
  last_backward_bytes_ = bytes;
  total_bytes_ += bytes;
  ++synced_backwards_;
  if (traced) trace::complete("reducer", trace::kSync, trace_sync_start_ns_, trace_args(-1));
}

void Reducer::check_finite(const Phase& phase) {
  std::vector<std::string> bad;
  for (const Bucket& b : phase.buckets) {
    if (all_finite(b.grad_bucket.buffer)) continue;
    for (size_t k = 0; k < b.params.size(); ++k) {  // only on the failure path: per parameter
      size_t i = b.params[k];
      if (!all_finite(b.grad_bucket.buffer.view_range(b.offsets[k], params_[i].shape())))
        bad.push_back(names_[i]);
    }
  }
  if (bad.empty()) return;
  ++non_finite_backwards_;
  std::string list;
  for (size_t k = 0; k < bad.size() && k < 8; ++k) list += (k ? ", '" : "'") + bad[k] + "'";
  if (bad.size() > 8) list += " and " + std::to_string(bad.size() - 8) + " more";
  if (options_.non_finite == NonFinitePolicy::stop) {
    TANDEM_FAIL("Reducer for " << options_.name << ": non-finite (NaN or Inf) averaged gradient in " << list
                               << " (phase " << phase.id << ", synced backward " << synced_backwards_ + 1
                               << "); every rank stops here. Lower the learning rate, or set "
                               << "ReducerOptions::non_finite (DdpOptions::reducer.non_finite) to "
                               << "NonFinitePolicy::skip_step to skip such steps");
  }
  for (std::string& name : bad) non_finite_names_.push_back(std::move(name));
}

bool Reducer::take_non_finite(std::vector<std::string>* names) {
  if (non_finite_names_.empty()) return false;
  if (names != nullptr) *names = non_finite_names_;
  non_finite_names_.clear();
  return true;
}

std::vector<PhaseStats> Reducer::stats() const {
  std::vector<const Phase*> ordered;
  for (const auto& [key, phase] : phases_) ordered.push_back(&phase);
  std::sort(ordered.begin(), ordered.end(), [](const Phase* a, const Phase* b) { return a->id < b->id; });
  std::vector<PhaseStats> out;
  for (const Phase* p : ordered) {
    PhaseStats s;
    std::vector<std::string> parts;
    for (size_t i : p->used) {
      if (std::find(parts.begin(), parts.end(), part_of(i)) == parts.end()) parts.push_back(part_of(i));
    }
    std::ostringstream os;
    os << "phase " << p->id << ": " << p->used.size() << " of " << params_.size() << " parameters (";
    for (size_t k = 0; k < parts.size(); ++k) os << (k ? ", " : "") << parts[k];
    os << ")";
    s.description = os.str();
    s.used_params = p->used.size();
    for (const Bucket& b : p->buckets) s.bucket_bytes.push_back(b.grad_bucket.buffer.bytes());
    s.bytes_per_backward = p->bytes;
    s.rebuilds = p->rebuilds;
    s.backwards = p->backwards;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem
