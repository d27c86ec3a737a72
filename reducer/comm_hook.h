// Communication hooks: what the Reducer does with a full bucket.
//
// Contract: launch(bucket) starts the reduction of bucket.buffer (the local gradients of
// the bucket's parameters, summed over local backwards, never pre-divided) and returns the
// Work to wait on, or nullptr if it finished synchronously; it sets bucket.bytes_sent to
// the bytes it puts on the wire. After that Work completes the Reducer calls
// finish(bucket), which must leave in bucket.buffer the average over ranks. Buckets are
// launched strictly in index order on every rank, so hooks may issue collectives.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/process_group.h"

namespace tandem {

struct GradBucket {
  size_t index = 0;
  Tensor buffer;                         // flat, one dtype and device
  std::vector<std::string> param_names;  // the parameters it holds, in layout order
  dist::ProcessGroup* group = nullptr;
  std::string tag;                       // "bucket 2 of phase G (generator.fc1.weight, ...)"
  size_t bytes_sent = 0;
  Tensor scratch;                        // for hooks that need a buffer of their own
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<dist::Work> launch(GradBucket& bucket) = 0;
  virtual void finish(GradBucket& bucket) = 0;
};

// Allreduce with average: the default.
std::shared_ptr<CommHook> allreduce_hook();
// Divides by the world size, converts to float16 (or bfloat16), sums, converts back. The
// pre-division keeps fp16 from overflowing as long as each rank's gradient fits.
std::shared_ptr<CommHook> fp16_compress_hook();
std::shared_ptr<CommHook> bf16_compress_hook();
// A user hook: fn receives the bucket and returns its reduced (averaged) contents, a
// tensor of the buffer's element count. Runs synchronously when the bucket is full.
std::shared_ptr<CommHook> make_comm_hook(std::string name, std::function<Tensor(GradBucket&)> fn);

}  // namespace tandem
