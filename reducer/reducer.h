// The Reducer: bucketed, overlapped gradient averaging scoped to each backward.
//
// Contract (DESIGN.md §3):
// - At construction the parameters are verified across ranks (names, dtypes, shapes; a
//   named error on the first difference) and broadcast from rank 0. The Reducer then
//   watches every backward (autograd's backward-begin seam) and every parameter's
//   grad-ready hook. A parameter is watched by one Reducer at a time (in the process):
//   a second Reducer over it, as when a model is wrapped twice, is an Error naming the
//   parameter and the first Reducer; destroying a Reducer releases its parameters.
// - A backward whose graph reaches none of this Reducer's parameters is not its business.
//   Otherwise, before any gradient is computed, ranks agree in one small allreduce on the
//   globally used set: parameters reachable from the roots on at least one rank. Exactly
//   that set is averaged; parameters no rank used keep their gradient untouched and cost
//   no bytes; parameters used elsewhere but not here contribute their current gradient
//   (zeros when they have none).
// - negotiate_grads false (pytorch-pfn-extras' flag; true by default) drops that
//   agreement: no collective before the buckets, and every parameter is averaged at every
//   synced backward (one phase), those this backward does not reach contributing their
//   current gradient (zeros when they have none). Exact when every backward reaches every
//   parameter; a D step of a GAN then also averages G's current gradients. Without the
//   agreement nothing checks that ranks are in step (see below): every rank must run the
//   same backwards, and a backward that reaches none of the parameters on one rank must
//   reach none on every rank (else prepare_for_backward on every rank). agreements()
//   counts the agreements issued.
// - Each used set is a phase with a cached bucket layout: registration order reversed for
//   its first backward, rebuilt once at its second backward from the gradient-ready order
//   rank 0 observed (broadcast, so all ranks agree).
// - The phase cache is bounded in bytes (ReducerOptions::phase_cache_mb; by default four
//   times the bytes of the Reducer's parameters). Before a new phase's buckets are made, the
//   least recently used phases are evicted until the buckets held (buffers and hooks'
//   scratch) plus the new phase's fit the cap; the new phase is always made, so a phase
//   larger than the cap still works, alone. Every rank sees the same sequence of agreed
//   sets, so every rank evicts the same phases. A used set that comes back after eviction
//   is a new phase (new id, built and rebuilt as above): only the summation order of its
//   first backward can differ. A GAN's D-step and G-step phases hold G + 2D bytes, and the
//   dynamic mlp GAN's four phases 2.9x its parameters, within the default cap, so they are
//   never evicted; nor is a progressive GAN's current stage (its earlier stages' phases
//   go). Rebuilding is not free (buckets made, in shared memory collectively; at a cap of
//   twice the parameters the dynamic mlp rebuilt a phase every 3 iterations, 0.1-0.3 ms
//   per step). A model that switches among more phases than fit rebuilds some at each
//   switch, and
//   one that draws a new subset of its layers at every step (LayerDrop) holds at most the
//   cap. Evicted and replaced buckets are freed past the host tensor cache (malloc reuses
//   them for any size; cpu_memory.h); with gradient_as_bucket_view, a gradient that is a
//   view keeps its bucket alive until the gradient is replaced.
// - A bucket's reduction is launched as soon as its last gradient is ready, strictly in
//   bucket order, while the backward goes on. At the end of the backward the Reducer
//   waits, and writes the averages into the gradients (or makes the gradients views into
//   the buckets with gradient_as_bucket_view).
// - prepare_for_backward(roots) does the agreement now for the next backward (the
//   explicit, MMGeneration-style call); the next backward then does not repeat it.
// - Inside no_sync() backwards accumulate locally and communicate nothing; the next
//   synced backward averages the accumulated sums, including parameters used only in the
//   no_sync backwards.
// - Non-finite gradients (ReducerOptions::non_finite): after averaging, each bucket is
//   checked with one reduction on its device (not per element on the host). The averages
//   are identical on every rank, so every rank reaches the same verdict with no extra
//   collective. stop: the backward throws an Error naming the parameters holding NaN/Inf
//   on every rank. skip_step: the gradients are left as they are and the next
//   OptimWrapper step of a wrapper attached to this Reducer is skipped on every rank.
//   off (the default) costs nothing.
// - Ranks whose backwards reach different parts of the model (parts are the first
//   component of parameter names, e.g. "generator" / "discriminator") are detected at the
//   agreement and every rank throws an error naming the part, its first parameter and the
//   option below. (A rank that reaches none of the parameters, having agreed through
//   prepare_for_backward, is not counted: it contributes zeros.)
// - allow_absent_ranks (off by default) allows it, for models whose graph depends on the
//   rank's data (pytorch-pfn-extras' dynamic graphs): a part that some ranks reach and
//   others do not is averaged over every rank, the absent ranks contributing their current
//   gradient, zeros when they have none or zeroed it (zero_grad before each step). So each
//   of its gradients is the sum over the ranks that used it, divided by the world size, as
//   every averaged gradient is. It also lets ranks that run different steps (a D step here,
//   a G step there) through, which the check exists to catch.
// - Shared memory (ReducerOptions::shared_memory_allreduce, on by default): over an MPI
//   group of two or more ranks on one host, with CPU float32 parameters, each bucket is
//   made in memory every rank maps (dist/shared_buffers.h; made collectively with the
//   bucket, and when any rank cannot, every rank keeps the MPI allreduce). With the default
//   reduction, a full bucket is published at once, its own slice summed as soon as every
//   rank has published (at launch when they have, else at the end of the backward), and
//   the end of the backward copies every rank's reduced slice straight into the gradients:
//   no MPI copies and no copy back of its own. Every rank gets bitwise
//   the same averages (each element summed once, by one rank). With gradient_as_bucket_view (or a non_finite
//   policy) the slices are copied into the bucket instead, and the backward returns once every rank has read
//   this rank's bucket, so that the gradients (views into it) may change. A registered comm hook or
//   reduce_function reduces shared buckets as any other. The agreement's counts go through shared memory too.
// - Hooks (reducer_hooks.h): register_comm_hook(hook) replaces the bucket reduction and
//   returns a HookHandle whose remove() restores the reduction before it (the default:
//   allreduce, or ReducerOptions::reduce_function, pytorch-pfn-extras' shape: it gets each
//   bucket's gradients as a tensor list and the group, and leaves their average in place).
//   register_pre_bucket_hook(fn) runs fn(index, flat buffer) before each bucket is
//   reduced, every bucket in index order, once per synced backward. broadcast_function
//   (same shape) replaces the broadcast of the initial parameters from rank 0 (and of the
//   buffers, in the wrappers): it must leave rank 0's values in every tensor.
// - find_unused_parameters and static_graph are accepted and ignored: each backward is
//   scoped to what it reaches anyway (what find_unused_parameters=true asks for, without a
//   graph walk of its own), and the layouts are cached per phase whatever static_graph
//   says; the agreement stays, since it is what catches ranks whose graphs differ
//   (negotiate_grads false drops it). Either one set to true writes one warning line to
//   stderr when the Reducer is made, saying so.
// - detect_anomalous_params (ReducerOptions; off by default, costs nothing then): at each
//   backward that reaches its parameters, the Reducer names the parameters that require
//   grad, belong to a part that backward reaches, yet were not reached from its roots on
//   this rank (a layer the loss forgot, a branch not taken). Parts the backward does not
//   reach at all are not listed (the D step of a GAN does not reach G by design). The
//   names are kept (unreached_parameters(), of the latest such backward) and written to
//   stderr as one warning line the first time each distinct set appears. From the used
//   set it already finds: no extra graph walk, no communication.
// - Tracing (runtime/trace.h; off by default, one relaxed load per site then): each synced
//   backward records its "agreement", each gradient's "pack", each bucket's "launch"
//   (whose collective's span, on the communication thread or GPU stream, carries the same
//   arguments), "wait" and "unpack", the whole as a "sync" span, and a "bytes in flight"
//   counter; every span names the sync's number and the phase ("model phase 2
//   (discriminator)"), bucket spans the bucket (trace_summary.h reads them).
// - Ranks must run the same backwards and optimizer steps in the same order while a
//   Reducer exists. Each agreement carries the rank's position: how many backwards this
//   Reducer has seen on this rank (every backward, including those that reach none of its
//   parameters and no_sync ones) and how many optimizer steps this thread has taken since
//   the Reducer was made (optim::steps_taken_on_this_thread). Ranks at different positions
//   -- one ran a backward that reached nothing here while another's reached the model, or
//   one skipped a backward -- would otherwise pair this agreement with another iteration's
//   and mix gradients of different steps; instead every rank throws an error listing each
//   rank's position. The check rides in the same collective (sums of the positions and of
//   their squares agree with all-equal positions only when they are equal). A rank whose
//   backward may legitimately reach none of the parameters calls prepare_for_backward(loss)
//   on every rank before every backward: it then takes part in the agreement with an
//   empty set and contributes its current gradients (zeros when it has none).
// - CUDA graphs (runtime/step_capture.h): a backward captured into a graph runs no
//   agreement (its collective reads the device on the host, and replays repeat device work
//   only). Its phase is the one its own used set names, which must already exist with its
//   rebuilt layout (two eager backwards of it: the warm-up), else an Error says so; no_sync
//   accumulation and the non-finite check cannot be captured (an Error names them). Each
//   replay is a promise, as static_graph is elsewhere, that every rank's backward reaches
//   the captured set: ranks capture at the same iteration, because they decide from the
//   same iteration and structure (models/train/step_graph.h), and replay in step. Replays
//   advance the counts (backwards seen, synced backwards, the phase's backwards and bytes)
//   as the captured backward did, so an eager backward after them agrees on positions. The
//   captured phase's buckets must not be evicted while the graph exists (a new phase made
//   eagerly may evict it: discard the graph first, as StepGraph does on any change).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/variable.h"
#include "reducer/bucket_assignment.h"
#include "reducer/comm_hook.h"
#include "reducer/reducer_hooks.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/shared_buffers.h"
#include "runtime/step_capture.h"
#include "runtime/trace.h"

namespace tandem {

enum class NonFinitePolicy { off, skip_step, stop };

struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool gradient_as_bucket_view = false;
  // Accepted for PyTorch users and ignored (true: one warning line at construction);
  // tandem always finds the used set from the graph, at the cost of one walk it already
  // does, so true and false behave the same.
  bool find_unused_parameters = false;
  // Accepted and ignored (true: one warning line at construction): layouts are cached per
  // phase whatever its value, and the agreement stays (negotiate_grads drops it).
  bool static_graph = false;
  // false: no agreement collective; every parameter averaged at every synced backward.
  bool negotiate_grads = true;
  // true: a part that only some ranks' backwards reach is averaged with zeros from the
  // others instead of being an error.
  bool allow_absent_ranks = false;
  // Replaces the allreduce of each bucket: gets the bucket's gradients (this rank's sums,
  // views into the bucket) and the group, and leaves their average over ranks in place.
  DistFunction reduce_function = nullptr;
  // Replaces the broadcast from rank 0 of the initial parameters (and, in the wrappers, of
  // the buffers): must leave rank 0's values in place in every tensor it is given.
  DistFunction broadcast_function = nullptr;
  // Name the parameters a backward's reached parts hold but its roots do not reach.
  bool detect_anomalous_params = false;
  // MPI groups whose ranks share a host: buckets live in shared memory and the default
  // reduction reads them directly (dist/shared_buffers.h) instead of going through MPI.
  // Also off with TANDEM_SHARED_MEMORY_ALLREDUCE=0.
  bool shared_memory_allreduce = true;
  std::string name = "model";  // in messages and tags
  NonFinitePolicy non_finite = NonFinitePolicy::off;
  // The most bytes the cached phases' buckets may hold, in MB; 0: four times the bytes of the
  // Reducer's parameters (a GAN's D and G phases fit). Infinity: never evict.
  double phase_cache_mb = 0.0;
};

struct PhaseStats {
  std::string description;  // "phase 1: 6 of 12 parameters (discriminator.*)"
  size_t used_params = 0;
  std::vector<size_t> bucket_bytes;  // per bucket, in layout order
  size_t bytes_per_backward = 0;     // bytes put on the wire by the last backward of this phase
  int rebuilds = 0;
  int64_t backwards = 0;
};

class Reducer : public BackwardObserver {
 public:
  Reducer(std::vector<Variable> params, std::vector<std::string> names,
          std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options = {});
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void prepare_for_backward(const Variable& root) { prepare_for_backward(std::vector<Variable>{root}); }
  void prepare_for_backward(const std::vector<Variable>& roots);

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

  // See the contract and reducer_hooks.h; both apply from the next backward.
  HookHandle register_comm_hook(std::shared_ptr<CommHook> hook);
  HookHandle register_pre_bucket_hook(PreBucketHook hook);

  // The cached phases, by id (evicted phases are gone).
  std::vector<PhaseStats> stats() const;
  // Bytes held by the cached phases' buckets (buffers and hooks' scratch), and the cap.
  size_t cached_bucket_bytes() const;
  size_t phase_cache_bytes() const { return phase_cache_bytes_; }
  // Phases evicted from the cache so far, to make room for new ones.
  int64_t evicted_phases() const { return evicted_phases_; }
  size_t last_backward_bytes() const { return last_backward_bytes_; }
  uint64_t total_bytes() const { return total_bytes_; }  // over every synced backward so far
  int64_t synced_backwards() const { return synced_backwards_; }
  // True while this Reducer's buckets (and agreement) are in shared memory: asked for, the
  // group one host's MPI ranks, and every shared segment made so far made on every rank.
  bool shared_memory() const { return shared_wanted_; }
  // Agreement collectives issued so far (none with negotiate_grads false).
  int64_t agreements() const { return agreements_; }
  // skip_step policy: true (once) when a backward since the last call averaged a NaN/Inf;
  // `names` then lists the parameters that held them.
  bool take_non_finite(std::vector<std::string>* names = nullptr);
  int64_t non_finite_backwards() const { return non_finite_backwards_; }
  // detect_anomalous_params: the parameters the latest backward that reached this Reducer
  // left unreached within the parts it reached, on this rank (empty when off).
  const std::vector<std::string>& unreached_parameters() const { return unreached_; }
  const std::vector<Variable>& parameters() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  dist::ProcessGroup& group() const { return *group_; }

  void on_backward_begin(const BackwardPass& pass) override;
  void on_backward_end(const BackwardPass& pass) override;

 private:
  struct Bucket {
    std::vector<size_t> params;
    std::vector<int64_t> offsets;  // element offset of each parameter in the buffer
    GradBucket grad_bucket;
    size_t pending = 0;
    std::shared_ptr<dist::Work> work;
    std::unique_ptr<dist::SharedBuffers> shared;  // the buffer's shared memory, when used
    uint64_t epoch = 0;                           // uses of `shared` so far
    bool reduced = false;                         // this backward's slice already reduced
    size_t held_bytes() const {                   // buffer and scratch
      return grad_bucket.buffer.bytes() + (grad_bucket.scratch.defined() ? grad_bucket.scratch.bytes() : 0);
    }
  };
  struct Phase {
    int id = 0;
    std::vector<size_t> used;  // parameter indices, registration order
    std::vector<Bucket> buckets;
    std::vector<int> bucket_of;        // per parameter, -1 when unused in this phase
    std::vector<int64_t> slot_offset;  // per parameter, element offset in its bucket
    std::vector<size_t> ready_order;   // of the last backward
    int rebuilds = 0;
    int64_t backwards = 0;
    size_t bytes = 0;
    uint64_t last_used = 0;  // use_clock_ at its latest activation
    std::string label;       // "model: 6 of 12 parameters (discriminator)", in traces
  };

  std::vector<bool> local_used(const std::vector<std::shared_ptr<VariableImpl>>& leaves) const;
  // detect_anomalous_params: records (and warns of a new set of) unreached parameters.
  void detect_unreached(const std::vector<bool>& local, int64_t backward);
  // Agreement, then activation: begin_sync runs both for a synced backward.
  void begin_sync(std::vector<bool> local, int64_t backward);
  // A backward captured into a CUDA graph: no agreement, a stable phase named by `local`.
  void begin_captured_sync(StepCapture& capture, const std::vector<bool>& local,
                           const std::vector<bool>& reachable);
  // One collective: the parameters used on at least one rank (throws naming a part that
  // some ranks reach and others do not).
  // `backward` is the position of the backward being synced (its count on this rank).
  std::vector<bool> agree_on_used_set(const std::vector<bool>& local, int64_t backward);
  // Its counts: per parameter, per part, ranks reaching any, and two positions with squares.
  size_t agreement_size() const { return params_.size() + parts_.size() + 5; }
  // Every rank's position (one more collective, on the failure path only) for the error.
  [[noreturn]] void fail_out_of_step(int64_t backward, int64_t steps);
  // Makes the phase of `global` the active one and readies its buckets; parameters in it
  // that this backward does not reach contribute their current gradient at once.
  void activate_phase(const std::vector<bool>& global, const std::vector<bool>& reachable);
  Phase& phase_for(const std::vector<bool>& global);
  // Evicts least recently used phases until `incoming` more bytes fit the cap.
  void make_room(size_t incoming);
  void build_layout(Phase& phase, const std::vector<size_t>& order);
  void maybe_rebuild(Phase& phase);
  void mark_ready(size_t index, const Tensor* grad);
  void launch_ready_buckets();
  // The shared-memory reduction of bucket `k` (dist/shared_buffers.h): its launch, its own
  // slice's reduction, and the copy of every slice to where the averages go.
  void launch_shared(Bucket& b, size_t k);
  void reduce_shared(Bucket& b, size_t k);
  void gather_shared(Bucket& b, bool into_buffer);
  void finish_sync();
  void check_finite(const Phase& phase);
  void abandon_sync();
  std::string part_of(size_t index) const;
  // One stderr line naming the PyTorch flags set that change nothing.
  void warn_ignored_options() const;
  // The active phase's trace arguments: this sync's number, the phase, and the bucket (>= 0).
  std::vector<trace::Arg> trace_args(int bucket) const;

  // Which Reducer watches each parameter, process-wide. Held as a member so that the
  // parameters are released also when the constructor throws after claiming them.
  class ParameterClaims {
   public:
    ParameterClaims() = default;
    ~ParameterClaims();
    ParameterClaims(const ParameterClaims&) = delete;
    ParameterClaims& operator=(const ParameterClaims&) = delete;
    // Claims every parameter for `owner`, or none: throws naming the first parameter that
    // another Reducer watches.
    void claim(const std::vector<Variable>& params, const std::vector<std::string>& names,
               const std::string& owner);

   private:
    std::vector<const VariableImpl*> held_;
  };

  std::vector<Variable> params_;
  std::vector<std::string> names_;
  ParameterClaims claims_;
  std::vector<uint64_t> hook_ids_;
  std::map<VariableImpl*, size_t> index_of_;
  std::vector<std::string> parts_;  // distinct parts, first-seen order
  std::vector<size_t> part_index_;  // per parameter
  std::shared_ptr<dist::ProcessGroup> group_;
  ReducerOptions options_;
  std::shared_ptr<ReducerHooks> hooks_;
  std::shared_ptr<CommHook> hook_;                         // the comm hook of the backward in flight
  std::shared_ptr<CommHook> default_hook_;                 // the plain allreduce, when it is the default
  bool shared_wanted_ = false;                             // buckets made in shared memory while it works
  bool shared_sync_ = false;                               // this backward reduces shared buckets itself
  std::unique_ptr<dist::SharedBuffers> agreement_shared_;  // the agreement's counts, when shared
  uint64_t agreement_epoch_ = 0;
  std::vector<PreBucketHook> pre_bucket_;  // the pre-bucket hooks of the backward in flight

  std::map<std::vector<bool>, Phase> phases_;
  Phase* active_ = nullptr;  // the phase of the backward in flight
  size_t phase_cache_bytes_ = 0;
  int next_phase_id_ = 1;
  uint64_t use_clock_ = 0;
  int64_t evicted_phases_ = 0;
  std::vector<bool> slot_ready_;
  size_t next_launch_ = 0;
  double prescale_ = 1.0;  // applied while copying into buckets (CommHook::prescaled)
  bool prepared_ = false;  // prepare_for_backward ran for the next backward
  bool sync_enabled_ = true;
  int64_t backwards_seen_ = 0;       // every backward this Reducer observed on this rank
  int64_t steps_base_ = 0;           // optim::steps_taken_on_this_thread() at construction
  std::vector<bool> unsynced_used_;  // used in no_sync backwards since the last sync
  size_t last_backward_bytes_ = 0;
  uint64_t total_bytes_ = 0;
  int64_t synced_backwards_ = 0;
  int64_t agreements_ = 0;
  int64_t non_finite_backwards_ = 0;
  std::vector<std::string> non_finite_names_;     // pending for take_non_finite
  std::vector<std::string> unreached_;            // detect_anomalous_params, latest backward
  std::set<std::vector<bool>> unreached_warned_;  // sets already written to stderr
  int64_t trace_sync_ = -1;                       // this synced backward's number in the trace; -1: untraced
  int64_t trace_sync_start_ns_ = 0;
  int64_t bytes_in_flight_ = 0;  // launched and not yet waited for (traced backwards)
};

}  // namespace tandem
