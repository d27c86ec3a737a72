// The hooks a Reducer runs around each bucket, and the handles that remove them.
//
// Contract:
// - The comm hook in use is the one registered last that has not been removed, else the
//   default the Reducer was made with (allreduce, or ReducerOptions::reduce_function).
//   Removing a hook therefore restores the one before it.
// - Pre-bucket hooks run, in registration order, just before each bucket is handed to the
//   comm hook, with the bucket's index and its flat buffer (see PreBucketHook).
// - add_* returns a HookHandle. handle.remove() takes that hook away; a second remove(),
//   or one after the Reducer is gone, does nothing. Dropping a handle keeps the hook. The
//   wrappers register one hook with each of their Reducers and return one handle for all.
// - Changes apply from the next backward: the Reducer takes a snapshot of the hooks when a
//   backward's synchronisation begins, so a hook may remove itself or register others.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "reducer/comm_hook.h"

namespace tandem {

// Called with the bucket's index (0, 1, ... in launch order) and its flat buffer: this
// rank's gradients of the bucket's parameters, already divided by the world size when the
// comm hook is prescaled (the default allreduce is). It may change the buffer in place.
using PreBucketHook = std::function<void(size_t index, Tensor& flat)>;

class ReducerHooks;

class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<ReducerHooks> hooks, uint64_t id) { held_.push_back({std::move(hooks), id}); }
  // One handle for the same hook registered with several Reducers (a wrapper's children):
  // remove() takes it from every one of them.
  explicit HookHandle(const std::vector<HookHandle>& handles);
  void remove();
  // True while the hook is registered with any of its Reducers (false after remove(), or
  // once the Reducers are gone).
  bool active() const;

 private:
  struct Held {
    std::weak_ptr<ReducerHooks> hooks;
    uint64_t id = 0;
  };
  std::vector<Held> held_;
};

class ReducerHooks {
 public:
  explicit ReducerHooks(std::shared_ptr<CommHook> fallback) : fallback_(std::move(fallback)) {}

  uint64_t add_comm_hook(std::shared_ptr<CommHook> hook);
  uint64_t add_pre_bucket_hook(PreBucketHook hook);
  void remove(uint64_t id);
  bool contains(uint64_t id) const { return comm_.count(id) > 0 || pre_bucket_.count(id) > 0; }

  // The comm hook in use now (see the contract).
  std::shared_ptr<CommHook> comm_hook() const;
  // The pre-bucket hooks in registration order.
  std::vector<PreBucketHook> pre_bucket_hooks() const;

 private:
  std::shared_ptr<CommHook> fallback_;
  std::map<uint64_t, std::shared_ptr<CommHook>> comm_;
  std::map<uint64_t, PreBucketHook> pre_bucket_;
  uint64_t next_id_ = 1;
};

}  // namespace tandem
