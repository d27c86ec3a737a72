// A ProcessGroup that forwards every operation to another group and records it, so a test
// can prove which collectives the Reducer issues (and which it no longer does).
//
// Contract: CountingGroup(inner) has inner's rank, size and name; each operation is passed
// to inner unchanged and its kind and tag are appended to ops() first. Used by one rank's
// thread (or process) only. Subgroups are inner's, uncounted.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::testing {

class CountingGroup final : public dist::ProcessGroup {
 public:
  struct Op {
    std::string kind;  // "allreduce", "broadcast", "allgather", "barrier"
    std::string tag;
  };

  explicit CountingGroup(std::shared_ptr<dist::ProcessGroup> inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->name()), inner_(std::move(inner)) {}

  dist::Backend backend() const override { return inner_->backend(); }
  Device tensor_device() const override { return inner_->tensor_device(); }
  std::shared_ptr<dist::Work> allreduce(Tensor& tensor, dist::ReduceOp op, const std::string& tag) override {
    ops_.push_back({"allreduce", tag});
    return inner_->allreduce(tensor, op, tag);
  }
  std::shared_ptr<dist::Work> broadcast(Tensor& tensor, int root, const std::string& tag) override {
    ops_.push_back({"broadcast", tag});
    return inner_->broadcast(tensor, root, tag);
  }
  std::shared_ptr<dist::Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                        const std::string& tag) override {
    ops_.push_back({"allgather", tag});
    return inner_->allgather(out, in, tag);
  }
  std::shared_ptr<dist::Work> allgather_flat(Tensor& out, const Tensor& in, const std::string& tag) override {
    ops_.push_back({"allgather", tag});
    return inner_->allgather_flat(out, in, tag);
  }
  std::shared_ptr<dist::Work> barrier(const std::string& tag) override {
    ops_.push_back({"barrier", tag});
    return inner_->barrier(tag);
  }
  std::shared_ptr<dist::ProcessGroup> new_subgroup(const std::vector<int>& ranks) override {
    return inner_->new_subgroup(ranks);
  }

  const std::vector<Op>& ops() const { return ops_; }
  void clear() { ops_.clear(); }
  // How many recorded operations of `kind` have a tag containing `part`.
  int count(const std::string& kind, const std::string& part) const {
    int n = 0;
    for (const Op& op : ops_) n += op.kind == kind && op.tag.find(part) != std::string::npos;
    return n;
  }

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
  std::vector<Op> ops_;
};

}  // namespace tandem::testing
