#include "reducer/bucket_store.h"

#include <algorithm>
#include <utility>

#include "runtime/error.h"

namespace tandem {

namespace {

std::vector<BucketParamInfo> bucket_infos(const std::vector<Variable>& params) {
  std::vector<BucketParamInfo> infos;
  for (const Variable& p : params) infos.push_back({p.numel(), p.dtype(), p.device()});
  return infos;
}

}  // namespace

BucketStore::BucketStore(std::vector<Variable> params, std::vector<std::string> names, ModelParts parts,
                         dist::ProcessGroup& group, std::shared_ptr<CommHook> default_hook,
                         BucketStoreOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      parts_(std::move(parts)),
      group_(group),
      default_hook_(std::move(default_hook)),
      options_(std::move(options)),
      layout_(bucket_infos(params_), parts_.of) {
  for (const Variable& p : params_) parameter_bytes_ += p.data().bytes();
  bool shared = options_.shared_memory;
  for (const Variable& p : params_) shared = shared && p.device().is_cpu() && p.dtype() == DType::f32;
  shared_transport_ =
      std::make_unique<SharedMemoryTransport>(group_, shared, options_.agreement_size, options_.name);
  // The flat storage, made once: shared memory when the transport can (one group then: CPU
  // float32), else a tensor per (dtype, device). A phase has at most one bucket per parameter.
  std::vector<size_t> first_of_group(layout_.groups(), params_.size());
  for (size_t i = params_.size(); i-- > 0;) first_of_group[layout_.group_of(i)] = i;
  for (size_t g = 0; g < layout_.groups(); ++g) {
    const Variable& first = params_[first_of_group[g]];
    Tensor flat = shared_transport_->make_storage(layout_.capacity(g), static_cast<int>(params_.size()));
    storage_.push_back(flat.defined() ? flat
                                      : Tensor::zeros({layout_.capacity(g)}, first.dtype(), first.device()));
  }
}

BucketStore::Phase& BucketStore::open(const std::vector<bool>& global,
                                      const std::shared_ptr<CommHook>& hook) {
  Phase& phase = phase_for(global);
  maybe_rebuild(phase);
  if (options_.gradient_as_bucket_view) move_out_of_storage(phase);
  shared_transport_->settle();  // before anything is packed into the storage
  hook_transport_.use(hook);
  phase.ready_order.clear();
  for (Bucket& b : phase.buckets) {
    b.pending = b.params.size();
    // Shared memory stands in for the default allreduce only.
    const bool shared = hook == default_hook_ && SharedMemoryTransport::holds(b);
    b.transport = shared ? static_cast<BucketTransport*>(shared_transport_.get()) : &hook_transport_;
    b.transport->begin(b);
  }
  return phase;
}

BucketStore::Phase* BucketStore::find(const std::vector<bool>& global) {
  auto it = phases_.find(global);
  return it == phases_.end() ? nullptr : &it->second;
}

BucketStore::Phase& BucketStore::phase_for(const std::vector<bool>& global) {
  auto it = phases_.find(global);
  if (it != phases_.end()) return it->second;
  Phase& phase = phases_[global];
  phase.id = next_phase_id_++;
  for (size_t i = 0; i < global.size(); ++i) {
    if (global[i]) phase.used.push_back(i);
  }
  // Names the parameter set, not the phase's id: a trace summary adds up its backwards.
  phase.label = options_.name + ": " + parts_.describe(phase.used);
  std::vector<size_t> order(phase.used.rbegin(), phase.used.rend());  // gradients arrive roughly in reverse
  build_layout(phase, order);
  return phase;
}

void BucketStore::move_out_of_storage(const Phase& phase) {
  // A gradient viewing the storage where this phase's buckets will be packed would be
  // overwritten: copy it out. Phases of one part lie in that part's region (flat_layout.h),
  // so a GAN's D and G steps copy nothing.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = params_[i].grad();
    const size_t group = layout_.group_of(i);
    const Tensor& flat = storage_[group];
    if (!grad.defined() || !grad.shares_storage_with(flat)) continue;
    const int64_t start = grad.offset() - flat.offset(), end = start + grad.numel();
    const int b = phase.bucket_of[i];
    if (b >= 0 && start == phase.buckets[static_cast<size_t>(b)].flat_offset + phase.slot_offset[i]) {
      continue;  // its slot in this phase too
    }
    bool overlapped = false;
    for (const Bucket& bucket : phase.buckets) {
      const int64_t bucket_start = bucket.flat_offset;
      const int64_t bucket_end = bucket_start + bucket.grad_bucket.buffer.numel();
      overlapped = overlapped || (layout_.group_of(bucket.params.front()) == group && start < bucket_end &&
                                  bucket_start < end);
    }
    if (overlapped) params_[i].set_grad(grad.clone());
  }
}

size_t BucketStore::bytes() const {
  // Whatever the buckets hold, counted where it is: the flat storage, and anything else
  // (a hook's scratch during a sync; a buffer of its own, which no bucket should have).
  size_t bytes = 0;
  for (const Tensor& flat : storage_) bytes += flat.bytes();
  for (const auto& [key, phase] : phases_) {
    for (const Bucket& b : phase.buckets) {
      const Tensor& flat = storage_[layout_.group_of(b.params.front())];
      if (!b.grad_bucket.buffer.shares_storage_with(flat)) bytes += b.grad_bucket.buffer.bytes();
      if (b.grad_bucket.scratch.defined()) bytes += b.grad_bucket.scratch.bytes();
    }
  }
  return bytes;
}

void BucketStore::build_layout(Phase& phase, const std::vector<size_t>& order) {
  std::vector<std::vector<size_t>> assignment = assign_buckets(bucket_infos(params_), order, options_.caps);
  const std::vector<int64_t> flat_offsets = layout_.place(assignment);

  phase.buckets.clear();  // views of the flat storage: no memory goes
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
    bucket.flat_offset = flat_offsets[b];
    bucket.grad_bucket.index = b;
    bucket.grad_bucket.tag = "bucket " + std::to_string(b) + " of phase " + std::to_string(phase.id) +
                             " of " + options_.name + " (" + names + ")";
    if (!shared_transport_->attach(bucket, bucket.flat_offset, total)) {
      const Tensor& flat = storage_[layout_.group_of(bucket.params.front())];
      bucket.grad_bucket.buffer = flat.view_range(bucket.flat_offset, {total});
    }
    for (size_t k = 0; k < bucket.params.size(); ++k) {
      const size_t i = bucket.params[k];
      bucket.grad_bucket.param_views.push_back(
          bucket.grad_bucket.buffer.view_range(bucket.offsets[k], params_[i].shape()));
    }
    bucket.grad_bucket.group = &group_;
    phase.buckets.push_back(std::move(bucket));
  }
}

void BucketStore::maybe_rebuild(Phase& phase) {
  if (phase.rebuilds > 0 || phase.backwards != 1) return;
  // Rank 0's observed ready order of the first backward becomes everyone's layout order.
  Tensor order = Tensor::zeros({static_cast<int64_t>(phase.used.size())}, DType::i64);
  int64_t* o = order.data<int64_t>();
  TANDEM_CHECK(phase.ready_order.size() == phase.used.size(),
               "internal: phase " << phase.id << " of " << options_.name << " recorded "
                                  << phase.ready_order.size() << " ready gradients for " << phase.used.size()
                                  << " parameters");
  for (size_t k = 0; k < phase.used.size(); ++k) o[k] = static_cast<int64_t>(phase.ready_order[k]);
  dist::broadcast_host(group_, order, 0,
                       "bucket rebuild order of phase " + std::to_string(phase.id) + " of " + options_.name);
  std::vector<size_t> rank0_order;
  for (size_t k = 0; k < phase.used.size(); ++k) rank0_order.push_back(static_cast<size_t>(o[k]));
  build_layout(phase, rank0_order);
  phase.rebuilds = 1;
}

std::vector<PhaseStats> BucketStore::stats() const {
  std::vector<const Phase*> ordered;
  for (const auto& [key, phase] : phases_) ordered.push_back(&phase);
  std::sort(ordered.begin(), ordered.end(), [](const Phase* a, const Phase* b) { return a->id < b->id; });
  std::vector<PhaseStats> out;
  const size_t storage_bytes = bytes();
  for (const Phase* p : ordered) {
    PhaseStats s;
    s.description = "phase " + std::to_string(p->id) + ": " + parts_.describe(p->used);
    s.used_params = p->used.size();
    for (const Bucket& b : p->buckets) s.bucket_bytes.push_back(b.grad_bucket.buffer.bytes());
    s.bytes_per_backward = p->bytes;
    s.rebuilds = p->rebuilds;
    s.backwards = p->backwards;
    s.storage_bytes = storage_bytes;
    s.parameter_bytes = parameter_bytes_;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tandem
