// Communication hooks: what the Reducer does with a full bucket.
//
// Contract: launch(bucket) starts the reduction of bucket.buffer and returns the Work to
// wait on, or nullptr if it finished synchronously; it sets bucket.bytes_sent to the bytes
// it puts on the wire. bucket.buffer holds the local gradients of the bucket's parameters
// (summed over local backwards), divided by the world size when the hook's prescaled() is
// true: the Reducer then fuses that division into its copy of each gradient into the
// bucket, so a summing hook costs no pass of its own (rounding differs from dividing the
// sum only for world sizes that are not powers of two). After the Work completes the
// Reducer calls finish(bucket), which must leave in bucket.buffer the average over ranks.
// Buckets are launched strictly in index order on every rank, so hooks may issue
// collectives.
// DistFunction has pytorch-pfn-extras' shape for reduce_function and broadcast_function:
// a function of a tensor list and the group that works in place (ReducerOptions).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem {

struct GradBucket {
  size_t index = 0;
  Tensor buffer;                         // flat, one dtype and device
  std::vector<std::string> param_names;  // the parameters it holds, in layout order
  std::vector<Tensor> param_views;       // their gradients: views into buffer, in their shapes
  dist::ProcessGroup* group = nullptr;
  std::string tag;  // "bucket 2 of phase G (generator.fc1.weight, ...)"
  size_t bytes_sent = 0;
  Tensor scratch;  // for hooks that need a buffer of their own
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual std::string name() const = 0;
  // True: launch receives gradients already divided by the world size.
  virtual bool prescaled() const { return false; }
  virtual std::shared_ptr<dist::Work> launch(GradBucket& bucket) = 0;
  virtual void finish(GradBucket& bucket) = 0;
};

// The default: gradients prescaled by the Reducer, then one allreduce (sum).
std::shared_ptr<CommHook> allreduce_hook();
// Prescaled, converted to float16 (or bfloat16), summed, converted back. The pre-division
// keeps fp16 from overflowing as long as each rank's gradient fits.
std::shared_ptr<CommHook> fp16_compress_hook();
std::shared_ptr<CommHook> bf16_compress_hook();
// A user hook: fn receives the bucket (local sums, not prescaled) and returns its reduced
// (averaged) contents, a tensor of the buffer's element count. Runs synchronously when the
// bucket is full.
std::shared_ptr<CommHook> make_comm_hook(std::string name, std::function<Tensor(GradBucket&)> fn);

// In place on `tensors`, collective over `group` (every rank passes tensors of the same
// shapes and dtypes in the same order).
using DistFunction = std::function<void(std::vector<Tensor>& tensors, dist::ProcessGroup& group)>;
// ReducerOptions::reduce_function as a hook: fn receives the bucket's param_views (this
// rank's gradients, not prescaled) and the bucket's group, and must leave in them the
// average over ranks. Runs synchronously when the bucket is full.
std::shared_ptr<CommHook> reduce_function_hook(DistFunction fn);

}  // namespace tandem
