// NcclProcessGroup: the ProcessGroup of process_group.h for CUDA tensors, over NCCL.
// CUDA builds only (TANDEM_HAVE_CUDA).
//
// Contract:
// - The constructor is collective over `comm`: it duplicates it, rank 0 makes the NCCL
//   unique id and broadcasts it over MPI, and every rank joins the NCCL communicator on
//   CUDA device `device`. Every tensor given to the group must live on that device.
//   It installs the CUDA memory of cuda_memory.h, so its caller can make CUDA tensors.
// - The group owns a CUDA stream. Each operation first makes that stream wait on an event
//   recorded on the caller's stream (set_stream; unless set, the issuing thread's
//   compute_stream() of runtime/cuda/stream.h, the legacy default stream outside a graph
//   capture), so it sees everything the caller queued before; it then runs on the group's
//   stream in issue order. Issuing never blocks the host.
// - Inside a CUDA graph capture (runtime/cuda/cuda_graph.h) an operation is captured: the
//   group's stream joins the capture, and the Work's wait() joins it back to the caller's
//   stream (every captured operation must be waited on before the capture ends). Captured
//   work is neither watched nor traced (it has not run), and synchronize() or barrier()
//   cannot be used on it. Each replay of the graph runs the operation again, in the
//   order captured: every rank must replay the same graphs in the same order.
// - Work::wait() makes the stream that was the caller's at issue wait for the operation;
//   the host does not block (except for barrier(), whose wait() blocks the host as a
//   barrier should). Work::synchronize() blocks the host until the operation finished,
//   and throws a timeout Error (as in process_group.h) at the operation's deadline.
// - A watchdog thread checks outstanding operations every 100 ms. One still running
//   kWatchdogGrace after its deadline (or an asynchronous NCCL error) aborts the NCCL
//   communicator and ends the job through abort_on_timeout: the caller may be blocked
//   inside CUDA, where no exception can reach it.
// - dtypes float32, float64, float16, bfloat16 for every op; avg is NCCL's ncclAvg;
//   int32, int64 and uint8 for every op but avg.
// - host_group() is an MpiProcessGroup over the same ranks, for collectives of host values
//   (process_group.h), with this group's timeout.
// - Destruction waits at most the group's timeout for outstanding work, then destroys the
//   NCCL communicator; stuck work ends the job through abort_on_timeout.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::dist {

inline constexpr std::chrono::milliseconds kWatchdogGrace{5000};

namespace detail {
struct NcclGroupState;
}  // namespace detail

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(MPI_Comm comm, int device, std::string name = "world");
  ~NcclProcessGroup() override;

  Backend backend() const override { return Backend::nccl; }
  Device tensor_device() const override { return Device::cuda(device()); }
  std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> broadcast(Tensor& tensor, int root, const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                  const std::string& tag = {}) override;
  std::shared_ptr<Work> allgather_flat(Tensor& out, const Tensor& in, const std::string& tag = {}) override;
  std::shared_ptr<Work> barrier(const std::string& tag = {}) override;
  std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) override;
  // An MPI group over the same ranks (made by the constructor, named "<name> (host)").
  ProcessGroup& host_group() override;

  // The caller's stream for operations issued afterwards.
  void set_stream(cudaStream_t stream);
  cudaStream_t stream() const;
  cudaStream_t comm_stream() const;  // the group's own stream
  int device() const;

 private:
  std::shared_ptr<detail::NcclGroupState> state_;
  std::shared_ptr<ProcessGroup> host_;  // host_group()
};

}  // namespace tandem::dist
