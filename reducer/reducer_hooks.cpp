#include "reducer/reducer_hooks.h"

namespace tandem {

HookHandle::HookHandle(const std::vector<HookHandle>& handles) {
  for (const HookHandle& h : handles) held_.insert(held_.end(), h.held_.begin(), h.held_.end());
}

void HookHandle::remove() {
  for (Held& h : held_) {
    if (auto hooks = h.hooks.lock()) hooks->remove(h.id);
  }
  held_.clear();
}

bool HookHandle::active() const {
  for (const Held& h : held_) {
    auto hooks = h.hooks.lock();
    if (hooks != nullptr && hooks->contains(h.id)) return true;
  }
  return false;
}

uint64_t ReducerHooks::add_comm_hook(std::shared_ptr<CommHook> hook) {
  const uint64_t id = next_id_++;
  comm_.emplace(id, std::move(hook));
  return id;
}

uint64_t ReducerHooks::add_pre_bucket_hook(PreBucketHook hook) {
  const uint64_t id = next_id_++;
  pre_bucket_.emplace(id, std::move(hook));
  return id;
}

void ReducerHooks::remove(uint64_t id) {
  comm_.erase(id);
  pre_bucket_.erase(id);
}

std::shared_ptr<CommHook> ReducerHooks::comm_hook() const {
  return comm_.empty() ? fallback_ : comm_.rbegin()->second;  // ids grow: the last is the latest
}

std::vector<PreBucketHook> ReducerHooks::pre_bucket_hooks() const {
  std::vector<PreBucketHook> out;
  out.reserve(pre_bucket_.size());
  for (const auto& [id, hook] : pre_bucket_) out.push_back(hook);
  return out;
}

}  // namespace tandem
