// BucketStore: where a Reducer's buckets live and which transport reduces each (DESIGN.md §3
// "Reducer"): the flat storage, every phase's bucket layout in it, and the shared memory of
// the ranks of one host. reducer.h says when the Reducer uses it.
//
// Contract:
// - Buckets live in one flat storage per (dtype, device) of the parameters, made at
//   construction, of the parameters' bytes (plus at most FlatLayout::kAlign - 1 elements
//   each), and never moved: shared memory when the shared-memory transport is active
//   (shared_memory_transport.h: CPU float32 parameters, one storage then), else a tensor.
// - Each used set is a phase with a cached bucket layout: registration order reversed at its
//   first backward, rebuilt once at its second from the ready order rank 0 observed in the
//   first (broadcast from rank 0). Every phase lays its buckets out in the storage, in its
//   model part's region when it holds one part's parameters (flat_layout.h), so a phase costs
//   offsets, not memory, and none is ever evicted.
// - A bucket goes to the shared-memory transport when its buffer is shared memory and the
//   comm hook of the backward is the default allreduce, else to that comm hook
//   (bucket_transport.h's CommHookTransport).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "reducer/bucket_assignment.h"
#include "reducer/bucket_transport.h"
#include "reducer/comm_hook.h"
#include "reducer/flat_layout.h"
#include "reducer/shared_memory_transport.h"
#include "reducer/used_set_agreement.h"
#include "runtime/dist/process_group.h"

namespace tandem {

struct PhaseStats {
  std::string description;  // "phase 1: 6 of 12 parameters (discriminator.*)"
  size_t used_params = 0;
  std::vector<size_t> bucket_bytes;  // per bucket, in layout order
  size_t bytes_per_backward = 0;     // bytes put on the wire by the last backward of this phase
  int rebuilds = 0;
  int64_t backwards = 0;
  // The Reducer's, the same in each of its phases: the flat storage every phase's buckets
  // share, and the parameters' bytes.
  size_t storage_bytes = 0;
  size_t parameter_bytes = 0;
};

struct BucketStoreOptions {
  std::string name;  // the Reducer's, in tags and phase labels
  BucketCaps caps;
  bool gradient_as_bucket_view = false;  // ReducerOptions'
  bool shared_memory = true;             // asked for (ReducerOptions::shared_memory_allreduce)
  int64_t agreement_size = 0;            // the counts sum_counts() sums; 0: no agreement
};

class BucketStore {
 public:
  // A bucket of a phase: its layout (TransportBucket's offsets, buffer and views) and its
  // progress through the backward in flight.
  struct Bucket : TransportBucket {
    std::vector<size_t> params;            // parameter indices, layout order
    int64_t flat_offset = 0;               // the buffer's first element in its flat storage
    size_t pending = 0;                    // gradients not yet packed
    BucketTransport* transport = nullptr;  // chosen as the backward's sync begins
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
    std::string label;  // "model: 6 of 12 parameters (discriminator)", in traces
  };

  // Collective over `group`, once the parameters are replicas: agrees on the shared-memory
  // transport (shared_memory_transport.h) and makes the flat storage. `names` and `parts`
  // name the parameters in tags and labels; `default_hook` is the plain allreduce when it is
  // the Reducer's default comm hook, else null.
  BucketStore(std::vector<Variable> params, std::vector<std::string> names, ModelParts parts,
              dist::ProcessGroup& group, std::shared_ptr<CommHook> default_hook, BucketStoreOptions options);

  // Readies the phase of `global` for a synced backward reduced by `hook`: made the first
  // time, rebuilt at its second backward (a collective), gradients that view the storage
  // where it lays out something else moved out of it (gradient_as_bucket_view; reducer.h),
  // the shared storage settled (SharedMemoryTransport::settle), and each bucket's transport
  // chosen and begun, every gradient pending.
  Phase& open(const std::vector<bool>& global, const std::shared_ptr<CommHook>& hook);
  // The phase of `global`, or null before its first backward.
  Phase* find(const std::vector<bool>& global);
  // Sums the agreement's int64 `counts` over the ranks, in place (SharedMemoryTransport's).
  void sum_counts(Tensor& counts) { shared_transport_->sum_counts(counts); }
  // True while the buckets (and the agreement) are in shared memory.
  bool shared_memory() const { return shared_transport_->active(); }
  // Reducer::bucket_bytes() (reducer.h).
  size_t bytes() const;
  size_t parameter_bytes() const { return parameter_bytes_; }
  // The phases, by id.
  std::vector<PhaseStats> stats() const;

 private:
  Phase& phase_for(const std::vector<bool>& global);
  // Lays the phase's buckets out in the storage, filled in `order` (parameter indices).
  void build_layout(Phase& phase, const std::vector<size_t>& order);
  // At the phase's second backward: rank 0's ready order of its first becomes its layout's.
  void maybe_rebuild(Phase& phase);
  // gradient_as_bucket_view: gradients viewing the storage where `phase` lays out something
  // else become tensors of their own (the phase is about to write there).
  void move_out_of_storage(const Phase& phase);

  std::vector<Variable> params_;
  std::vector<std::string> names_;
  ModelParts parts_;
  dist::ProcessGroup& group_;
  std::shared_ptr<CommHook> default_hook_;
  BucketStoreOptions options_;
  FlatLayout layout_;
  std::unique_ptr<SharedMemoryTransport> shared_transport_;
  CommHookTransport hook_transport_;  // the comm hook of the backward in flight
  std::vector<Tensor> storage_;       // per group of layout_: the flat bucket storage
  size_t parameter_bytes_ = 0;
  std::map<std::vector<bool>, Phase> phases_;
  int next_phase_id_ = 1;
};

}  // namespace tandem
