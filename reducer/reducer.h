// The Reducer: bucketed, overlapped gradient averaging scoped to each backward (DESIGN.md §3
// "Reducer"; each option's meaning is with it in ReducerOptions). A synced backward runs
// begin (the agreement, the phase) -> mark ready (each gradient packed into its bucket) ->
// launch (each full bucket) -> finish (wait, write the averages).
//
// Contract:
// - Construction verifies the parameters across ranks (names, dtypes, shapes; an Error on
//   the first difference) and broadcasts them from rank 0. A parameter is watched by one
//   Reducer at a time (parameter_claims.h); destroying the Reducer releases it.
// - A backward is scoped to the parameters it writes: those it reaches that require grad,
//   and, when it is given inputs (engine.h), are among them (a GAN's G step given G's
//   parameters leaves D alone: not computed, not averaged, .grad untouched).
// - A backward that reaches none of the parameters is not its business. Otherwise, before
//   any gradient is computed, the ranks agree on the globally used set (used_set_agreement.h):
//   exactly that set is averaged. Parameters no rank used keep their gradient and cost no
//   bytes; parameters used elsewhere but not here contribute their current gradient (zeros
//   without one). The same collective checks that the ranks are in step (the same backwards
//   and optimizer steps, in the same order, while the Reducer exists) and reach the same
//   parts, else every rank throws. A rank whose backward may reach none of the parameters
//   calls prepare_for_backward(loss) before every backward, on every rank.
// - Each used set is a phase with a cached bucket layout, laid out in one flat storage made
//   at construction (bucket_store.h: where the buckets lie, when a layout is rebuilt, which
//   transport reduces each bucket). With gradient_as_bucket_view, a gradient that views the
//   storage where a phase about to run lays out something else is copied out of it first
//   (into a tensor of its own), so no phase changes another's gradients.
// - Each gradient is packed into its bucket as it becomes ready; a full bucket goes to its
//   transport at once (bucket_transport.h), strictly in bucket order, while the backward
//   goes on: the comm hook in use (the default allreduce, reduce_function or a registered
//   hook, over MPI or NCCL), or, in place of the default allreduce on one host, shared
//   memory (shared_memory_transport.h). At the end of the backward the Reducer waits for
//   every bucket and writes the averages into the gradients, or makes the gradients views
//   into the buckets (gradient_as_bucket_view). Every rank gets bitwise the same averages.
// - Inside no_sync() backwards accumulate locally and communicate nothing; the next synced
//   backward averages the sums, including parameters used only under no_sync.
// - Tracing: each synced backward records what sync_trace.h says.
// - CUDA graphs (runtime/step_capture.h): a captured backward runs no agreement. Its phase
//   is the one its own used set names, already rebuilt (two eager backwards first), else an
//   Error; no_sync accumulation and the non-finite check cannot be captured. A replay is a
//   promise that every rank reaches that set again; replays advance the Reducer's counts as
//   the captured backward did. The flat storage never moves, so neither do its buckets.
// - Ways out to communication: the Reducer reaches the other ranks here and nowhere else,
//   each a step every rank takes at the same point:
//   1. construction: verify_replicas and broadcast_from_rank0 (replica_sync.h), then the
//      BucketStore's agreed shared-memory choice and segments (shared_memory_transport.h);
//   2. the agreement of a synced backward (used_set_agreement.h): its counts summed by
//      BucketStore::sum_counts, and one more allreduce for the Error when ranks are out of step;
//   3. a phase's layout rebuild, at its second backward: rank 0's ready order broadcast
//      (BucketStore::open);
//   4. each bucket's transport (bucket_transport.h: the comm hook in use, or the shared-memory
//      buckets, whose windows BucketStore::open waits for every rank to have read before a
//      sync packs into them again).
//   The non-finite check and detect_anomalous_params are local (the averages are equal on
//   every rank).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "reducer/bucket_store.h"
#include "reducer/comm_hook.h"
#include "reducer/parameter_claims.h"
#include "reducer/reducer_hooks.h"
#include "reducer/sync_trace.h"
#include "reducer/used_set_agreement.h"
#include "runtime/dist/process_group.h"
#include "runtime/step_capture.h"

namespace tandem {

enum class NonFinitePolicy { off, skip_step, stop, scrub };

struct ReducerOptions {
  // Bucket sizes: parameters are assigned by size, one dtype and device per bucket, the
  // first bucket smaller so that communication starts early (bucket_assignment.h).
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  // true: after each synced backward the gradients are views into the buckets (no copy
  // back); a view keeps its bucket alive until the gradient is replaced.
  bool gradient_as_bucket_view = false;
  // Accepted for PyTorch users and ignored (true: one warning line at construction);
  // tandem always finds the used set from the graph, at the cost of one walk it already
  // does, so true and false behave the same.
  bool find_unused_parameters = false;
  // Accepted and ignored (true: one warning line at construction): layouts are cached per
  // phase whatever its value, and the agreement stays (negotiate_grads drops it).
  bool static_graph = false;
  // false (pytorch-pfn-extras' flag): no agreement collective; every parameter is averaged
  // at every synced backward (one phase), those a backward does not reach contributing
  // their current gradient (zeros without one): exact when every backward reaches every
  // parameter (a GAN's D step then also averages G's current gradients). Nothing then
  // checks that the ranks are in step: every rank must run the same backwards, and a
  // backward that reaches none of the parameters on one rank must reach none on every rank.
  bool negotiate_grads = true;
  // true: a part that some ranks' backwards reach and others' do not (a graph that depends
  // on the rank's data) is averaged over every rank, the absent ranks contributing their
  // current gradient (zeros without one): each gradient is the sum over the ranks that used
  // it divided by the world size. It also lets through ranks that run different steps (a D
  // step here, a G step there), which the check exists to catch. A parameter no rank used
  // keeps its gradient (undefined without one), as PyTorch's. A rank whose backward reaches
  // none of the parameters takes part only when it announces the backward with
  // prepare_for_backward (as PyTorch's DDP does in its forward): unannounced, a backward
  // that reaches none of them is taken as not about this Reducer (another model's, a rank's
  // own computation). Cost: no collective of its own (the agreement's sums already count
  // the ranks using each parameter, so they carry the union); every rank then reduces the
  // union's buckets. false: an Error naming the part, its first parameter and this option.
  bool allow_absent_ranks = false;
  // Replaces the allreduce of each bucket: gets the bucket's gradients (this rank's sums,
  // views into the bucket) and the group, and leaves their average over ranks in place.
  DistFunction reduce_function = nullptr;
  // Replaces the broadcast from rank 0 of the initial parameters (and, in the wrappers, of
  // the buffers): must leave rank 0's values in place in every tensor it is given.
  DistFunction broadcast_function = nullptr;
  // true: at each backward that reaches its parameters, the Reducer names those that
  // require grad and belong to a part the backward reaches, yet were not reached from its
  // roots on this rank (a layer the loss forgot); parts it does not reach at all are not
  // listed. unreached_parameters() keeps them; each distinct set is written to stderr once.
  // No graph walk or communication of its own; false costs nothing.
  bool detect_anomalous_params = false;
  // MPI groups whose ranks share a host: buckets live in shared memory and the default
  // reduction reads them directly (shared_memory_transport.h) instead of going through MPI.
  // Also off with TANDEM_SHARED_MEMORY_ALLREDUCE=0.
  bool shared_memory_allreduce = true;
  std::string name = "model";  // in messages and tags
  // After averaging, each bucket is checked with one reduction on its device; the averages
  // are equal on every rank, so is the verdict (no collective). stop: the backward throws
  // naming the parameters holding NaN/Inf. skip_step: the gradients are left as they are
  // and the next step of an OptimWrapper attached to this Reducer is skipped, on every rank.
  // scrub: in the averages, NaN becomes 0 and +-Inf +-kScrubLimit (kernels/non_finite.h),
  // bitwise alike on every rank, and the step goes on; scrubbed_elements() counts them.
  NonFinitePolicy non_finite = NonFinitePolicy::off;
};

class Reducer : public BackwardObserver {
 public:
  // Collective over `group` (see the contract); `names` name `params` in messages and parts.
  Reducer(std::vector<Variable> params, std::vector<std::string> names,
          std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options = {});
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Runs the agreement now for the next backward, from its roots (MMGeneration's explicit
  // call); that backward then does not repeat it.
  // With `inputs`: for a backward given those inputs (BackwardOptions::inputs). A prepared
  // set larger than what the backward then writes (prepared without the inputs its backward
  // is given) still works: those parameters contribute their current gradient, as a rank
  // that does not reach them would.
  void prepare_for_backward(const Variable& root) { prepare_for_backward(std::vector<Variable>{root}); }
  void prepare_for_backward(const std::vector<Variable>& roots);
  void prepare_for_backward(const std::vector<Variable>& roots, const std::vector<Variable>& inputs);

  // While the guard lives, backwards accumulate locally and communicate nothing.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r) : reducer_(r), previous_(r.sync_enabled_) { r.sync_enabled_ = false; }
    ~NoSyncGuard() { reducer_.sync_enabled_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer& reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces the bucket reduction (comm_hook.h); the handle's remove() restores the one
  // before it (reducer_hooks.h). Applies from the next backward.
  HookHandle register_comm_hook(std::shared_ptr<CommHook> hook);
  // Runs hook(index, flat buffer) before each bucket is reduced, every bucket in index
  // order, once per synced backward. Applies from the next backward.
  HookHandle register_pre_bucket_hook(PreBucketHook hook);

  // The phases, by id (PhaseStats: bucket_store.h).
  std::vector<PhaseStats> stats() const { return store_->stats(); }
  // Bytes of the flat bucket storage (every phase's buckets; a comm hook's scratch too while
  // held: during a sync, or for a captured step), and of the parameters: bucket_bytes() <=
  // parameter_bytes() plus kAlign - 1 elements per parameter (flat_layout.h) outside syncs.
  size_t bucket_bytes() const { return store_->bytes(); }
  size_t parameter_bytes() const { return store_->parameter_bytes(); }
  // Bytes the last synced backward put on the wire.
  size_t last_backward_bytes() const { return last_backward_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }           // over every synced backward so far
  int64_t synced_backwards() const { return synced_backwards_; }  // backwards that averaged
  // True while this Reducer's buckets (and agreement) are in shared memory: asked for, the
  // group one host's MPI ranks, and every shared segment made so far made on every rank.
  bool shared_memory() const { return store_->shared_memory(); }
  // Agreement collectives issued so far (none with negotiate_grads false).
  int64_t agreements() const { return agreement_.issued(); }
  // skip_step policy: true (once) when a backward since the last call averaged a NaN/Inf;
  // `names` then lists the parameters that held them.
  bool take_non_finite(std::vector<std::string>* names = nullptr);
  int64_t non_finite_backwards() const { return non_finite_backwards_; }  // that averaged a NaN/Inf
  // scrub policy: per parameter (parameters()' order), the averaged elements replaced so far
  // (empty before the first).
  const std::vector<int64_t>& scrubbed_elements() const { return scrubbed_; }
  static constexpr double kScrubLimit = 1e5;  // what +-Inf becomes
  // detect_anomalous_params: the parameters the latest backward that reached this Reducer
  // left unreached within the parts it reached, on this rank (empty when off).
  const std::vector<std::string>& unreached_parameters() const { return unreached_; }
  const std::vector<Variable>& parameters() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  dist::ProcessGroup& group() const { return *group_; }

  // The engine's seam (autograd/engine.h): a backward's reachable leaves at its start,
  // and its end (waits, writes the averages).
  void on_backward_begin(const BackwardPass& pass) override;
  void on_backward_end(const BackwardPass& pass) override;

 private:
  using Bucket = BucketStore::Bucket;
  using Phase = BucketStore::Phase;

  std::vector<bool> local_used(const std::vector<std::shared_ptr<VariableImpl>>& leaves) const;
  // prepare_for_backward from this rank's used set.
  void prepare_local(std::vector<bool> local);
  // At a prepared backward's start: the used parameters it will not write contribute their
  // current gradient now.
  void contribute_unwritten(const std::vector<bool>& written);
  // detect_anomalous_params: records (and warns of a new set of) unreached parameters.
  void detect_unreached(const std::vector<bool>& local, int64_t backward);
  // Agreement, then activation: begin_sync runs both for a synced backward.
  void begin_sync(std::vector<bool> local, int64_t backward);
  // A backward captured into a CUDA graph: no agreement, a stable phase named by `local`.
  void begin_captured_sync(StepCapture& capture, const std::vector<bool>& local,
                           const std::vector<bool>& reachable);
  // Makes the phase of `global` the active one and readies its buckets; parameters in it
  // that this backward does not reach contribute their current gradient at once.
  void activate_phase(const std::vector<bool>& global, const std::vector<bool>& reachable);
  void mark_ready(size_t index, const Tensor* grad);
  void launch_ready_buckets();
  // Waits for every bucket, then writes the averages where they go.
  void finish_sync();
  // The averages of `b` into the gradients, or the gradients made views of the buffer;
  // `in_buffer`: the buffer holds them already (else its transport unpacks them).
  void write_averages(Bucket& b, bool in_buffer);
  void check_finite(Phase& phase);
  void abandon_sync();
  // One stderr line naming the PyTorch flags set that change nothing.
  void warn_ignored_options() const;

  std::vector<Variable> params_;
  std::vector<std::string> names_;
  ParameterClaims claims_;
  std::vector<uint64_t> hook_ids_;
  std::map<VariableImpl*, size_t> index_of_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ReducerOptions options_;
  UsedSetAgreement agreement_;
  std::shared_ptr<ReducerHooks> hooks_;
  std::unique_ptr<BucketStore> store_;     // made once the parameters are replicas
  std::vector<PreBucketHook> pre_bucket_;  // the pre-bucket hooks of the backward in flight
  Phase* active_ = nullptr;                // the phase of the backward in flight
  std::vector<bool> slot_ready_;
  size_t next_launch_ = 0;
  double prescale_ = 1.0;  // applied while copying into buckets (CommHook::prescaled)
  bool prepared_ = false;  // prepare_for_backward ran for the next backward
  bool sync_enabled_ = true;
  int64_t backwards_seen_ = 0;        // every backward this Reducer observed on this rank
  int64_t backwards_unreaching_ = 0;  // of those, the ones that reached none of its parameters
  int64_t steps_base_ = 0;            // optim::steps_taken_on_this_thread() at construction
  std::vector<bool> unsynced_used_;   // used in no_sync backwards since the last sync
  size_t last_backward_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  int64_t synced_backwards_ = 0;
  int64_t non_finite_backwards_ = 0;
  std::vector<std::string> non_finite_names_;     // pending for take_non_finite
  std::vector<int64_t> scrubbed_;                 // scrub: per parameter, elements replaced
  std::vector<std::string> unreached_;            // detect_anomalous_params, latest backward
  std::set<std::vector<bool>> unreached_warned_;  // sets already written to stderr
  SyncTrace trace_;                               // the sync in flight, in the trace
};

}  // namespace tandem
