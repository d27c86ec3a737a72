// ProcessGroup: collectives over a set of ranks, each returning an asynchronous Work.
//
// Contract (DESIGN.md §3):
// - allreduce, broadcast, allgather and barrier are collective: every rank of the group
//   issues the same operations, on tensors of the same element count and dtype, in the
//   same order. A group executes its operations one at a time in issue order, so Work k
//   completes before Work k+1.
// - The call returns at once; the tensors it names must stay untouched (neither read nor
//   written by the caller) until wait() returns. The Work holds the tensors' storage alive.
// - allreduce is in place. avg is sum divided by size() (floating-point dtypes only; sum,
//   max and min also take the integer dtypes, exactly). broadcast overwrites the tensor on
//   every rank but `root` (a rank of this group) with root's. allgather fills out[i] with
//   rank i's `in`; out has size() tensors of in's element count, dtype and device
//   (allgather_flat: one tensor of size() * in.numel() elements, rank i's block at
//   i * in.numel()).
// - wait() blocks until the operation finished and throws tandem::Error if it failed, or
//   dist::TimeoutError (an Error) if it did not finish before its deadline (or cannot,
//   behind one that did not): the time it was issued plus the group's
//   timeout at that time (default 300 s, or TANDEM_COLLECTIVE_TIMEOUT_S seconds when set;
//   set_timeout changes it for later operations). The timeout message names the op, the
//   element count, dtype and bytes, the tag, this rank, the group size and the timeout,
//   e.g. "allreduce (sum) of 1000 float32 elements, tag 'bucket 3 of phase D', timed out
//   after 2 s on rank 1 of 2 ...". After a timeout the group is unusable: later
//   operations throw at once, and destroying it ends the job through abort_on_timeout
//   (its communication may be stuck for ever, and MPI cannot be shut down around it).
// - is_completed() is true once the operation finished, successfully or not.
// - While tracing (runtime/trace.h) is on at issue, the MPI and NCCL backends record each
//   operation's span where it runs (the communication thread; the NCCL stream, timed by
//   CUDA events) in category "comm", named by the op ("allreduce (sum)"), with the
//   issuer's trace::current_args() and the bytes.
// - new_subgroup(ranks) is collective over this group: every rank passes the same list
//   of this group's ranks; members get a group whose rank i is ranks[i], the others get
//   nullptr.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/launch_env.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace tandem::dist {

enum class ReduceOp : uint8_t { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

// threads: the ranks are threads of one process (thread_process_group.h), for tests.
enum class Backend : uint8_t { mpi, nccl, threads };
const char* backend_name(Backend backend);  // "mpi", "nccl", "threads"

inline constexpr double kDefaultTimeoutS = 300.0;
inline constexpr const char* kTimeoutEnvVar = "TANDEM_COLLECTIVE_TIMEOUT_S";
// Exit code a job ends with through abort_on_timeout, or when MPI start-up or shut-down
// outlives the deadline (init_process_group, shutdown_process_groups).
inline constexpr int kTimeoutExitCode = 3;

// TANDEM_COLLECTIVE_TIMEOUT_S (seconds, a positive number) when set, else 300 s: the
// deadline of every collective, and of MPI shut-down. A value that is not a positive
// number throws an Error naming the variable.
std::chrono::milliseconds default_timeout();

// TANDEM_STARTUP_TIMEOUT_S (seconds, a positive number) when set, else the larger of 120 s
// and default_timeout(): the deadline of MPI start-up, which on a loaded node can take far
// longer than any collective (a short collective timeout must not end healthy jobs there).
// A value that is not a positive number throws an Error naming the variable.
inline constexpr double kMinStartupTimeoutS = 120.0;
inline constexpr const char* kStartupTimeoutEnvVar = "TANDEM_STARTUP_TIMEOUT_S";
std::chrono::milliseconds startup_timeout();

// What a collective's wait throws when its deadline passed: a program that ends the job on
// it prints it as every job-ending timeout line, "tandem: ending the job: [rank r] ...".
class TimeoutError : public Error {
 public:
  using Error::Error;
};

class Work {
 public:
  virtual ~Work() = default;
  // Waits for completion (see the contract above); NCCL: makes the caller's stream wait.
  virtual void wait() = 0;
  // Like wait(), and also blocks the host until the data is in place (NCCL: the stream
  // work finished). The MPI backend's wait() already does.
  virtual void synchronize() { wait(); }
  virtual bool is_completed() const = 0;
  // "allreduce (sum) of 1000 float32 elements, tag 'bucket 3 of phase D'"
  virtual const std::string& description() const = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual Backend backend() const = 0;
  // Where the tensors given to this group must live: the CPU for MPI, the group's GPU for
  // NCCL.
  virtual Device tensor_device() const { return Device::cpu(); }
  // "world", or "world/{0,2}" for a subgroup of world ranks 0 and 2.
  const std::string& name() const { return name_; }

  virtual std::shared_ptr<Work> allreduce(Tensor& tensor, ReduceOp op = ReduceOp::sum,
                                          const std::string& tag = {}) = 0;
  virtual std::shared_ptr<Work> broadcast(Tensor& tensor, int root, const std::string& tag = {}) = 0;
  virtual std::shared_ptr<Work> allgather(std::vector<Tensor>& out, const Tensor& in,
                                          const std::string& tag = {}) = 0;
  virtual std::shared_ptr<Work> allgather_flat(Tensor& out, const Tensor& in,
                                               const std::string& tag = {}) = 0;
  virtual std::shared_ptr<Work> barrier(const std::string& tag = {}) = 0;
  virtual std::shared_ptr<ProcessGroup> new_subgroup(const std::vector<int>& ranks) = 0;
  // The group that runs collectives of host values (allreduce_host and the others below)
  // over the same ranks, with this group's timeout: the group itself when its tensors live
  // on the CPU. A GPU group answers with a host group of its own: staged through the
  // device, a collective of a few host counts would wait for every kernel queued before it
  // (the Reducer's agreement at each backward: 5.9 ms of a 25 ms dcgan64 step on an H200).
  virtual ProcessGroup& host_group() { return *this; }

  // Applies to operations issued afterwards; must be positive.
  void set_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }

 protected:
  ProcessGroup(int rank, int size, std::string name);

  // Checks shared by the backends; each throws an Error naming the op and the operand.
  void check_allreduce_args(const Tensor& tensor, ReduceOp op) const;
  void check_broadcast_args(const Tensor& tensor, int root) const;
  void check_allgather_args(const std::vector<Tensor>& out, const Tensor& in) const;
  void check_allgather_flat_args(const Tensor& out, const Tensor& in) const;
  void check_subgroup_ranks(const std::vector<int>& ranks) const;

 private:
  int rank_;
  int size_;
  std::string name_;
  std::atomic<int64_t> timeout_ms_;
};

// Blocking collectives on small host tensors (agreement counts, layouts, logged values),
// whatever the backend: run by group.host_group(), or staged through the device when that
// is a group whose tensors live on a GPU. Returns once `host` holds the result.
void allreduce_host(ProcessGroup& group, Tensor& host, ReduceOp op, const std::string& tag);
void broadcast_host(ProcessGroup& group, Tensor& host, int root, const std::string& tag);
// Rank `root`'s `text` on every rank (its length as an int64, then its bytes as uint8).
std::string broadcast_string(ProcessGroup& group, const std::string& text, int root, const std::string& tag);

// True when out[0..n) are consecutive views of one storage (out[i] starts where out[i-1]
// ends), so one flat allgather fills them all. Shared by the backends.
bool are_consecutive_views(const std::vector<Tensor>& out);

// Descriptions and timeout messages, shared by the backends.
std::string describe_op(const std::string& op, int64_t count, DType dtype, const std::string& tag);
std::string timeout_message(const std::string& description, std::chrono::milliseconds timeout, int rank,
                            int size, const std::string& detail);

// Policy for a timeout nobody can recover from: prints "tandem: ending the job: " and the
// error as error_line writes it ("[rank r] <message> [at <file>:<line>]") to stderr, and ends the
// whole job (MPI_Abort with kTimeoutExitCode when MPI is running, else _Exit).
[[noreturn]] void abort_on_timeout(const Error& error);

// How long abort_job lets other ranks print before it ends the job.
inline constexpr std::chrono::milliseconds kAbortGrace{2000};
// Policy for an error one rank met on its own while other ranks may be waiting for it in a
// collective (a file only this rank cannot read, a full disk): waits `grace`, so that ranks
// failing the same way can print their own error, then ends the whole job at once
// (MPI_Abort with exit_code when MPI is running, else _Exit) instead of leaving the others
// to their collective timeout. The caller prints its error first; abort_job prints nothing
// more, so that a failing rank's error is its one line.
[[noreturn]] void abort_job(int exit_code, std::chrono::milliseconds grace = kAbortGrace);

// Initialises MPI when nobody has (MPI_Init_thread asking for MPI_THREAD_MULTIPLE; at
// least MPI_THREAD_SERIALIZED must be granted, else an Error says which level was; if
// MPI_Init_thread has not returned within startup_timeout(), because a rank is frozen or
// was never started, the process ends with kTimeoutExitCode after one line
// "tandem: ending the job: [rank r] start-up (MPI_Init_thread) did not finish within <s> s
// (TANDEM_STARTUP_TIMEOUT_S): ...", the rank taken from the launch environment), checks
// the launch environment against MPI_COMM_WORLD (an Error names the variable that
// disagrees), calls set_process_rank and returns a new group over the world. nccl: the
// CUDA device is the local rank modulo the device count.
std::shared_ptr<ProcessGroup> init_process_group(Backend backend = Backend::mpi);

// Stops every live MPI group (waiting at most its timeout for queued operations; a stuck
// one ends the job through abort_on_timeout) and calls MPI_Finalize if init_process_group
// initialised MPI. MPI_Finalize is bounded by default_timeout(): past the deadline the
// process ends with kTimeoutExitCode after a line naming "shut-down (MPI_Finalize)". Idempotent;
// groups used afterwards throw.
void shutdown_process_groups();

// RAII: init_from_env() + init_process_group() on construction, shutdown on destruction,
// except when destroyed by an exception in flight: MPI then stays up for the handler to end
// the job (run_main, runtime/dist/run_main.h).
class DistributedContext {
 public:
  explicit DistributedContext(Backend backend = Backend::mpi);
  ~DistributedContext();
  DistributedContext(const DistributedContext&) = delete;
  DistributedContext& operator=(const DistributedContext&) = delete;

  const LaunchEnv& env() const { return env_; }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

 private:
  LaunchEnv env_;
  std::shared_ptr<ProcessGroup> world_;
};

}  // namespace tandem::dist
