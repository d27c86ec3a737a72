// MpiProcessGroup: the ProcessGroup of process_group.h over an MPI communicator.
//
// Contract:
// - The constructor is collective over `comm`: it duplicates it (the group never touches
//   the caller's communicator again) and starts one communication thread. That thread
//   runs the group's operations in issue order with blocking MPI collectives, so the
//   caller keeps computing while a collective runs; it sleeps when the queue is empty.
// - MPI must be initialised with at least MPI_THREAD_SERIALIZED. Under MPI_THREAD_MULTIPLE
//   groups run concurrently; under SERIALIZED every MPI call tandem makes takes one
//   process-wide lock, so the collectives of different groups run one after another and
//   the caller must make no MPI calls of its own while a group has work queued.
// - dtypes: float32 and float64 for every op; float16 and bfloat16 for every op too, sum,
//   max and min through user-defined MPI_Ops that add/compare in float and round back to
//   16 bits after each pairwise step (the payload stays 16-bit on the wire); int32, int64
//   and uint8 for every op but avg, with MPI's own exact integer reductions.
// - avg divides the sum by size() (a true division, so (n+1)/2-style results are exact).
// - CUDA tensors (CUDA builds only): staged through a pinned host buffer unless the MPI
//   library reports itself CUDA-aware; the data must be ready with respect to the legacy
//   default stream when the operation runs.
// - Counts above INT_MAX elements are split into several MPI calls (allreduce, broadcast);
//   allgather needs in.numel() * size() <= INT_MAX.
// - Destruction drains the queue (until the last queued operation's deadline); a stuck or
//   timed-out group ends the job through abort_on_timeout instead of hanging. MPI_Finalize,
//   whoever calls it, first does the same for every live group (a hook on MPI_COMM_SELF),
//   so finalising with work queued or stuck cannot hang either.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::dist {

namespace detail {
struct MpiGroupState;
}  // namespace detail

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(MPI_Comm comm, std::string name = "world");
  ~MpiProcessGroup() override;

  Backend backend() const override { return Backend::mpi; }
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root, const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather_flat(Tensor& out, const Tensor& in, const std::string& tag = {}) override;
  std::shared_ptr<Work> barrier(const std::string& tag = {}) override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;

  // The group's own (duplicated) communicator. Use it only from the caller's thread and
  // only while the group has no work queued.
  MPI_Comm comm() const;
  // This group's ranks as ranks of MPI_COMM_WORLD.
  const std::vector<int>& world_ranks() const;

 private:
  std::shared_ptr<detail::MpiGroupState> state_;
};

}  // namespace tandem::dist
