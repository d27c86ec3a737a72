// BucketTransport: how a full bucket reaches the other ranks, one of the Reducer's ways out
// to communication (reducer.h lists them all). A full bucket goes to its transport, which
// reduces it over the ranks and delivers the averages. Two kinds exist (bucket_store.h
// chooses between them per bucket):
// CommHookTransport, a comm hook (comm_hook.h: the default allreduce, the compression hooks,
// a user's hook or reduce_function) over the group's collectives (MPI, NCCL); and the
// shared-memory buckets of one host (shared_memory_transport.h).
//
// Contract, per synced backward, for the buckets of the phase in flight:
// - begin(bucket) for every bucket, in index order, before anything is packed into it;
// - launch(bucket) as soon as the bucket is full, strictly in index order on every rank
//   (so a transport may issue collectives); the buffer then holds this rank's gradients,
//   divided by the world size when the comm hook is prescaled. It sets bytes_sent.
//   progress(bucket) follows at once, outside the launch's trace span: whatever of the
//   reduction can be done now without waiting;
// - at the end of the backward, wait(bucket) for every bucket in index order: this rank's
//   part of the reduction is done. Unless unpacks(), the buffer then holds the averages;
// - unpacks(): the averages reach their place only through unpack(bucket, grads), which
//   writes them into grads (the bucket's gradients, defined, in layout order) or, with
//   grads null, into the buffer. release(bucket) then precedes any write to the buffer
//   (gradients that view it, gradient_as_bucket_view; the non-finite scrub): it returns once
//   the buffer may change.
// Trace spans a transport records for a bucket carry trace::current_args(): the Reducer
// scopes the bucket's arguments around launch, progress and wait.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "reducer/comm_hook.h"
#include "runtime/dist/process_group.h"

namespace tandem {

struct SharedBucket;  // shared_memory_transport.h: include it where buckets are destroyed

// A bucket as its transport sees it.
struct TransportBucket {
  GradBucket grad_bucket;                // index, flat buffer, per-parameter views, tag, bytes_sent
  std::vector<int64_t> offsets;          // element offset of each parameter's gradient in the buffer
  std::shared_ptr<dist::Work> work;      // CommHookTransport: the collective in flight
  std::unique_ptr<SharedBucket> shared;  // SharedMemoryTransport: the buffer's shared memory
};

class BucketTransport {
 public:
  virtual ~BucketTransport() = default;
  // Readies the bucket for this backward, before anything is packed into it.
  virtual void begin(TransportBucket& bucket) = 0;
  // Starts reducing the full bucket; sets bucket.grad_bucket.bytes_sent.
  virtual void launch(TransportBucket& bucket) = 0;
  // Right after launch(): the part of the reduction that needs no waiting (none by default).
  virtual void progress(TransportBucket& /*bucket*/) {}
  // Returns once this rank's part of the bucket's reduction is done.
  virtual void wait(TransportBucket& bucket) = 0;
  // True when the averages are delivered by unpack(), not left in the buffer by wait().
  virtual bool unpacks() const { return false; }
  // Writes the averages into `grads` (one per parameter, layout order), or into the buffer
  // when grads is null. Called after wait() and only when unpacks().
  virtual void unpack(TransportBucket& /*bucket*/, std::vector<Tensor>* /*grads*/) {}
  // Before the gradients become views of the buffer: returns once they may change it.
  virtual void release(TransportBucket& /*bucket*/) {}
};

// A comm hook over the group's collectives: launch() is the hook's launch, wait() waits
// for its Work and calls its finish(), which leaves the averages in the buffer.
class CommHookTransport final : public BucketTransport {
 public:
  // The hook of the backwards from now on (the Reducer reads it as each sync begins).
  void use(std::shared_ptr<CommHook> hook) { hook_ = std::move(hook); }

  void begin(TransportBucket& bucket) override { bucket.work = nullptr; }
  void launch(TransportBucket& bucket) override { bucket.work = hook_->launch(bucket.grad_bucket); }
  void wait(TransportBucket& bucket) override {
    if (bucket.work) bucket.work->wait();
    hook_->finish(bucket.grad_bucket);
  }

 private:
  std::shared_ptr<CommHook> hook_;
};

}  // namespace tandem
