// MPI's lifetime as tandem sees it: initialisation, the thread level, the process-wide MPI
// lock, and shutting down every live group before MPI_Finalize.
//
// Contract:
// - ensure_mpi_initialized() calls MPI_Init_thread(MPI_THREAD_MULTIPLE) when nobody has
//   (remembering that tandem did it) and checks that at least MPI_THREAD_SERIALIZED was
//   granted (an Error names the level that was). The call is bounded by the start-up
//   deadline (startup_timeout()): if it has not returned by then, a PhaseWatchdog names
//   the phase, launch_rank (when >= 0) and the deadline, and ends the process.
// - lock_mpi() is held around every MPI call tandem makes: it owns the process-wide MPI
//   lock under MPI_THREAD_SERIALIZED and nothing under MPI_THREAD_MULTIPLE. MpiLock is the
//   same as a scope object.
// - Groups register a StoppableGroup; shutdown_mpi() stops every live one (each drains its
//   queue or ends the job through abort_on_timeout), then calls MPI_Finalize if
//   ensure_mpi_initialized did MPI_Init, bounded by the collective deadline (a
//   PhaseWatchdog ends the process if another rank never reaches its MPI_Finalize). The
//   same stop runs inside MPI_Finalize when the program finalises MPI itself (a hook on
//   MPI_COMM_SELF), so finalising with work queued or stuck cannot hang; the rest of such
//   a program's own MPI_Init and MPI_Finalize is not bounded by tandem.
#pragma once

#include <memory>
#include <mutex>

namespace tandem::dist::detail {

// launch_rank: this process's rank by the launch environment, or -1 when none said.
void ensure_mpi_initialized(int launch_rank);
// Throws unless MPI runs with at least MPI_THREAD_SERIALIZED; records whether MPI calls
// must be serialised.
void check_thread_level();
// True while MPI is initialised and not finalised.
bool mpi_running();
// True when MPI_Abort may be called: MPI runs, or tandem's MPI_Finalize hook is running.
bool mpi_abort_possible();

std::unique_lock<std::mutex> lock_mpi();
class MpiLock {
 public:
  MpiLock() : lock_(lock_mpi()) {}

 private:
  std::unique_lock<std::mutex> lock_;
};

class StoppableGroup {
 public:
  virtual ~StoppableGroup() = default;
  virtual void stop() = 0;
};
// Keeps a weak reference; installs the MPI_Finalize hook on first use.
void register_group(const std::shared_ptr<StoppableGroup>& group);
void shutdown_mpi();

}  // namespace tandem::dist::detail
