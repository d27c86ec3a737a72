// SharedMemoryTransport: the default allreduce of a Reducer whose MPI ranks share a host,
// with the Reducer's flat bucket storage made in memory every rank maps
// (runtime/dist/shared_buffers.h), each bucket a window of it.
//
// Contract (beside bucket_transport.h's):
// - It is active over an MPI group of two or more ranks when the Reducer asks for it
//   (ReducerOptions::shared_memory_allreduce, CPU float32 parameters) and
//   TANDEM_SHARED_MEMORY_ALLREDUCE is not 0. Over an MPI group of two or more ranks the
//   constructor agrees that choice with one small allgather: when the variable is 0 on some
//   ranks only (or `wanted` differs), every rank throws an Error naming the variable and
//   each rank's value, instead of the ranks' collectives going out of step.
//   make_storage() makes the one flat storage shared, collectively; when any rank cannot,
//   it is inactive from then on, on every rank, and the buckets keep the comm hook's
//   allreduce. attach() makes a bucket a window of that storage (no collective): bucket k
//   of any phase uses window k's flags. Phases' windows overlap, so settle() must come
//   before anything is written into the storage for a new sync (whichever transport then
//   reduces it).
// - It stands in for the default allreduce only: a registered comm hook or reduce_function
//   reduces shared buckets as any other (the Reducer chooses per bucket and backward).
// - launch() publishes the full bucket; this rank's slice of it is summed as soon as every
//   rank has published (at progress() when they have and every earlier bucket is reduced,
//   else at wait()). unpack() copies every rank's reduced slice straight into the
//   gradients, or into the buffer (for gradient_as_bucket_view and the non-finite check):
//   no MPI copies, no copy back of its own. Each element is summed once, by one rank, in
//   rank order, so every rank gets bitwise the same averages. release() returns once every
//   rank has read this rank's buffer.
// - sum_counts() sums the Reducer's agreement (int64 counts) through shared memory too,
//   when that memory could be made, else through the group's allreduce.
// - Each reduction of a bucket records a "comm" span named "shared-memory allreduce (sum)".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reducer/bucket_transport.h"
#include "runtime/dist/shared_buffers.h"

namespace tandem {

// One bucket's window of the shared storage and where its reduction stands.
struct SharedBucket {
  std::unique_ptr<dist::SharedBuffers> memory;
  uint64_t epoch = 0;    // this backward's use of the window (SharedBuffers' protocol)
  bool reduced = false;  // this rank's slice reduced, in this backward
};

class SharedMemoryTransport final : public BucketTransport {
 public:
  // Collective over an MPI group of two or more ranks (the choice is agreed; the agreement's
  // memory is made when active and agreement_size > 0).
  // `wanted`: asked for, and every parameter a CPU float32 one.
  SharedMemoryTransport(dist::ProcessGroup& group, bool wanted, int64_t agreement_size, std::string name);

  // True while buckets are made in shared memory (see the contract).
  bool active() const { return active_; }
  // Collective: makes the flat storage (numel float32, for buckets of at most `buckets` per
  // phase) shared memory and returns its local buffer, or returns an undefined tensor
  // (inactive, or some rank could not) and leaves the storage to the caller.
  Tensor make_storage(int64_t numel, int buckets);
  // Makes the bucket's buffer elements [first, first + numel) of the shared storage and
  // returns true, or returns false when there is none.
  bool attach(TransportBucket& bucket, int64_t first, int64_t numel);
  // Returns once every rank has read every window used so far (nothing without storage).
  void settle();
  // Whether this transport reduces `bucket` (its buffer is shared).
  static bool holds(const TransportBucket& bucket) { return bucket.shared != nullptr; }
  // Sums the int64 `counts` over the ranks, in place.
  void sum_counts(Tensor& counts);

  void begin(TransportBucket& bucket) override;
  void launch(TransportBucket& bucket) override;
  void progress(TransportBucket& bucket) override;
  void wait(TransportBucket& bucket) override;
  bool unpacks() const override { return true; }
  void unpack(TransportBucket& bucket, std::vector<Tensor>* grads) override;
  void release(TransportBucket& bucket) override;

 private:
  dist::ProcessGroup& group_;
  std::string name_;  // the Reducer's, in tags
  bool active_ = false;
  std::unique_ptr<dist::SharedBuffers> agreement_;
  std::unique_ptr<dist::SharedBuffers> storage_;
  std::vector<uint64_t> epochs_;                              // per window: its uses so far
  std::vector<std::unique_ptr<dist::SharedBuffers>> fences_;  // per window, for wait_finished
  uint64_t agreement_epoch_ = 0;
  bool in_order_ = false;  // every bucket launched so far in this backward is reduced
};

}  // namespace tandem
