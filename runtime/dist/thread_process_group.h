// ThreadProcessGroup: the ProcessGroup of process_group.h whose ranks are threads of one
// process, so code above it (the Reducer) is tested without mpirun.
//
// Contract:
// - make_thread_groups(size) returns one group per rank (element r is rank r), sharing one
//   rendezvous. Each rank's group is used by that rank's thread (one thread may also drive
//   several ranks, issuing on each before waiting on any). run_ranks(size, fn) runs
//   fn(group of rank r) on one thread per rank, joins them all and, if any threw, throws an
//   Error naming the rank that threw first and its message. As soon as one rank throws, the
//   others' pending and later operations fail at once (no waiting for the timeout).
// - Semantics are the MPI group's (mpi_process_group.h): issue order, async Work, in-place
//   allreduce, broadcast, allgather(_flat), barrier, new_subgroup, the same descriptions and
//   timeout messages. Results do not depend on thread timing: reductions combine the ranks
//   in rank order 0..N-1 (acc = x0, then acc = op(x_r, acc)); avg is that sum divided by
//   size(); float16/bfloat16 combine in float and round after each pairwise step, exactly
//   as the MPI group's 16-bit ops (mpi_reduce_ops.h). A dtype without a reduction throws
//   naming it.
// - An operation runs when the last rank issues it, on that rank's thread; the others'
//   calls return at once. Ranks that issue different operations at the same position (op,
//   reduce op or root, element count, dtype, subgroup ranks; tags may differ, as in MPI)
//   get an Error naming every rank's operation.
// - A timeout, a mismatch, a rank that threw (run_ranks) or abort() makes the rendezvous
//   unusable: every rank's pending operations fail with that reason and later ones throw at
//   once. Nothing is left stuck, so unlike MPI nothing ends the process.
// - Destroying a rank's group waits for its pending operations (until their deadlines).
// - Tensors must be on the CPU. Process-wide state stays shared by the rank threads: the
//   default RNG (pass each rank a Generator), the process rank in error messages, and
//   autograd's backward observers (give each rank thread a ThreadObserverScope,
//   autograd/observer_scope.h, so its Reducer sees only its own rank's backwards).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::dist {

namespace detail {
struct ThreadRendezvous;
}  // namespace detail

class ThreadProcessGroup final : public ProcessGroup {
 public:
  ThreadProcessGroup(std::shared_ptr<detail::ThreadRendezvous> rendezvous, int rank);
  ~ThreadProcessGroup() override;

  Backend backend() const override { return Backend::threads; }
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root, const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather_flat(Tensor& out, const Tensor& in, const std::string& tag = {}) override;
  std::shared_ptr<Work> barrier(const std::string& tag = {}) override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;

  // Makes every rank's pending and later operations fail with `reason` (idempotent: the
  // first reason stays). Subgroups made from this group fail with it.
  void abort(const std::string& reason);

 private:
  std::shared_ptr<detail::ThreadRendezvous> rendezvous_;
};

std::vector<std::shared_ptr<ProcessGroup>> make_thread_groups(int size, const std::string& name = "world");

void run_ranks(int size, const std::function<void(std::shared_ptr<ProcessGroup>)>& fn);

}  // namespace tandem::dist
