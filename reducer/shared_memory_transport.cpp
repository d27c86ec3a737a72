#include "reducer/shared_memory_transport.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/error.h"
#include "runtime/trace.h"

namespace tandem {

namespace {

// The span of a bucket's reduction (a collective's span, like "allreduce (sum)").
constexpr const char* kSharedReduce = "shared-memory allreduce (sum)";

constexpr const char* kEnvName = "TANDEM_SHARED_MEMORY_ALLREDUCE";

// A rank's choice as sent to the others: [wanted, variable set, its value (truncated)].
constexpr size_t kChoiceBytes = 64;

std::string raw_value(const uint8_t* choice) {
  const char* text = reinterpret_cast<const char*>(choice + 2);
  return std::string(text, strnlen(text, kChoiceBytes - 2));
}

// TANDEM_SHARED_MEMORY_ALLREDUCE=0 turns the shared-memory buckets off (any other value,
// or none, leaves ReducerOptions::shared_memory_allreduce in charge).
bool allowed_by_env(const uint8_t* choice) { return choice[1] == 0 || raw_value(choice) != "0"; }

std::string env_value(const uint8_t* choice) {
  if (choice[1] == 0) return "unset";
  std::string quoted = "\"";
  quoted += raw_value(choice);
  quoted += '"';
  return quoted;
}

// "rank 0: unset; ranks 1, 2: "0"": the ranks grouped by what `describe` says of them.
template <typename Describe>
std::string ranks_by(int size, Describe describe) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int q = 0; q < size; ++q) {
    const std::string what = describe(q);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == what; });
    if (it == groups.end()) {
      groups.emplace_back(what, std::vector<int>{});
      it = groups.end() - 1;
    }
    it->second.push_back(q);
  }
  std::string out;
  for (const auto& [what, ranks] : groups) {
    out += out.empty() ? "" : "; ";
    out += ranks.size() == 1 ? "rank " : "ranks ";
    for (size_t k = 0; k < ranks.size() && k < 8; ++k) out += (k ? ", " : "") + std::to_string(ranks[k]);
    if (ranks.size() > 8) out += " and " + std::to_string(ranks.size() - 8) + " more";
    out += ": " + what;
  }
  return out;
}

// Whether the ranks use shared memory, agreed by all (one small allgather): a rank whose
// choice differed would issue the segments' collectives while the others do not, and the
// job would wait a whole collective timeout, then name an unrelated collective.
bool agreed_choice(dist::ProcessGroup& group, bool wanted, const std::string& name) {
  Tensor mine = Tensor::zeros({static_cast<int64_t>(kChoiceBytes)}, DType::u8);
  uint8_t* own = mine.data<uint8_t>();
  own[0] = wanted ? 1 : 0;
  if (const char* value = std::getenv(kEnvName)) {
    own[1] = 1;
    std::memcpy(own + 2, value, std::min(std::strlen(value), kChoiceBytes - 3));
  }
  Tensor all = Tensor::zeros({static_cast<int64_t>(kChoiceBytes) * group.size()}, DType::u8);
  group.allgather_flat(all, mine, "shared-memory choice of " + name)->wait();
  auto choice = [&](int q) { return all.data<uint8_t>() + kChoiceBytes * static_cast<size_t>(q); };
  bool same_wanted = true, same_allowed = true;
  for (int q = 1; q < group.size(); ++q) {
    same_wanted = same_wanted && choice(q)[0] == choice(0)[0];
    same_allowed = same_allowed && allowed_by_env(choice(q)) == allowed_by_env(choice(0));
  }
  // Every rank reaches the same verdicts, from the same gathered choices.
  TANDEM_CHECK(same_wanted, "the Reducer for "
                                << name << " asks for the shared-memory allreduce on some ranks only ("
                                << ranks_by(group.size(), [&](int q) { return choice(q)[0] ? "yes" : "no"; })
                                << "): ReducerOptions::shared_memory_allreduce, or the parameters' device "
                                   "and dtype (CPU float32), differ across ranks");
  TANDEM_CHECK(!wanted || same_allowed,
               kEnvName << " differs across ranks ("
                        << ranks_by(group.size(), [&](int q) { return env_value(choice(q)); })
                        << "), found by the Reducer for " << name
                        << ": the shared-memory allreduce is on or off on every rank together, so set it the "
                           "same way on every rank (mpirun -x "
                        << kEnvName << "=0 turns it off everywhere)");
  return wanted && allowed_by_env(own);
}

}  // namespace

SharedMemoryTransport::SharedMemoryTransport(dist::ProcessGroup& group, bool wanted, int64_t agreement_size,
                                             std::string name)
    : group_(group), name_(std::move(name)) {
  active_ =
      group_.backend() == dist::Backend::mpi && group_.size() > 1 && agreed_choice(group_, wanted, name_);
  if (active_ && agreement_size > 0) {
    agreement_ = dist::SharedBuffers::create(group_, agreement_size, "used-parameter agreement of " + name_,
                                             DType::i64);
    active_ = agreement_ != nullptr;  // the same on every rank
  }
}

Tensor SharedMemoryTransport::make_storage(int64_t numel, int buckets) {
  if (!active_ || numel == 0) return Tensor();
  storage_ = dist::SharedBuffers::create(group_, numel, "gradient buckets of " + name_, DType::f32, buckets);
  active_ = storage_ != nullptr;  // the same on every rank
  if (!active_) return Tensor();
  epochs_.assign(static_cast<size_t>(buckets), 0);
  fences_.resize(static_cast<size_t>(buckets));
  return storage_->local();
}

bool SharedMemoryTransport::attach(TransportBucket& bucket, int64_t first, int64_t numel) {
  if (!storage_ || numel == 0) return false;  // an empty bucket needs no reduction of its own
  const int w = static_cast<int>(bucket.grad_bucket.index);
  bucket.shared = std::make_unique<SharedBucket>();
  bucket.shared->memory = storage_->window(w, first, numel, bucket.grad_bucket.tag);
  bucket.grad_bucket.buffer = bucket.shared->memory->local();
  return true;
}

void SharedMemoryTransport::sum_counts(Tensor& counts) {
  if (!agreement_) {
    dist::allreduce_host(group_, counts, dist::ReduceOp::sum, "used-parameter agreement of " + name_);
    return;
  }
  // The same sum, without MPI's copies and the communication thread.
  dist::SharedBuffers& shared = *agreement_;
  shared.begin(++agreement_epoch_);
  std::memcpy(shared.local().data<int64_t>(), counts.data<int64_t>(), counts.bytes());
  shared.publish(agreement_epoch_);
  shared.wait_published(agreement_epoch_);
  shared.sum_range(0, counts.numel(), counts.data<int64_t>());
  shared.end(agreement_epoch_);
}

void SharedMemoryTransport::settle() {
  for (size_t v = 0; v < epochs_.size(); ++v) {
    if (epochs_[v] == 0) continue;
    if (!fences_[v])
      fences_[v] =
          storage_->window(static_cast<int>(v), 0, storage_->numel(), "gradient buckets of " + name_);
    fences_[v]->wait_finished(epochs_[v]);
  }
}

void SharedMemoryTransport::begin(TransportBucket& bucket) {
  SharedBucket& s = *bucket.shared;
  s.reduced = false;
  s.epoch = ++epochs_[bucket.grad_bucket.index];
  s.memory->begin(s.epoch);
}

void SharedMemoryTransport::launch(TransportBucket& bucket) {
  bucket.grad_bucket.bytes_sent = bucket.grad_bucket.buffer.bytes();
  bucket.shared->memory->publish(bucket.shared->epoch);
}

void SharedMemoryTransport::progress(TransportBucket& bucket) {
  // Reduced now when every rank has published it already, strictly in bucket order.
  if (bucket.grad_bucket.index > 0 && !in_order_) return;
  SharedBucket& s = *bucket.shared;
  const int64_t start_ns = trace::enabled() ? trace::now_ns() : 0;
  s.reduced = s.memory->try_reduce(s.epoch);
  in_order_ = s.reduced;
  if (s.reduced && trace::enabled()) trace::complete("comm", kSharedReduce, start_ns, trace::current_args());
}

void SharedMemoryTransport::wait(TransportBucket& bucket) {
  SharedBucket& s = *bucket.shared;
  if (s.reduced) return;
  const int64_t start_ns = trace::enabled() ? trace::now_ns() : 0;
  s.memory->reduce(s.epoch);
  s.reduced = true;
  if (trace::enabled()) trace::complete("comm", kSharedReduce, start_ns, trace::current_args());
}

void SharedMemoryTransport::unpack(TransportBucket& bucket, std::vector<Tensor>* grads) {
  dist::SharedBuffers& shared = *bucket.shared->memory;
  const uint64_t epoch = bucket.shared->epoch;
  float* own = bucket.grad_bucket.buffer.data<float>();
  std::vector<float*> out;  // into the gradients; none: into the buffer
  if (grads != nullptr) {
    for (Tensor& grad : *grads) out.push_back(grad.data<float>());
  }
  for (int q = 0; q < shared.size(); ++q) {
    const auto [lo, hi] = shared.slice(q);
    if (lo == hi) continue;
    const float* source = q == shared.rank() ? own + lo : shared.reduced_slice(q, epoch);
    if (grads == nullptr) {
      if (q != shared.rank()) std::memcpy(own + lo, source, static_cast<size_t>(hi - lo) * sizeof(float));
      continue;
    }
    for (size_t k = 0; k < out.size(); ++k) {  // the part of each gradient in this slice
      const int64_t first = bucket.offsets[k], last = first + (*grads)[k].numel();
      const int64_t from = std::max(lo, first), to = std::min(hi, last);
      if (from >= to) continue;
      std::memmove(out[k] + (from - first), source + (from - lo),
                   static_cast<size_t>(to - from) * sizeof(float));
    }
  }
  shared.end(epoch);
}

void SharedMemoryTransport::release(TransportBucket& bucket) {
  bucket.shared->memory->wait_finished(bucket.shared->epoch);
}

}  // namespace tandem
