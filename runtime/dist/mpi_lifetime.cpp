#include "runtime/dist/mpi_lifetime.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "runtime/dist/mpi_check.h"
#include "runtime/dist/phase_watchdog.h"
#include "runtime/dist/process_group.h"

namespace tandem::dist {

void abort_on_timeout(const Error& error) {
  // The shape of every job-ending line (run_main's, the phase watchdog's): "[rank r] <message>
  // [at <file>:<line>]", whichever path ends the job.
  write_stderr_line("tandem: ending the job: " + error_line(error, "tandem"));
  std::fflush(stderr);
  if (detail::mpi_abort_possible()) MPI_Abort(MPI_COMM_WORLD, kTimeoutExitCode);
  std::_Exit(kTimeoutExitCode);
}

void abort_job(int exit_code, std::chrono::milliseconds grace) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::this_thread::sleep_for(grace);
  if (detail::mpi_abort_possible()) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

namespace detail {

namespace {

std::mutex g_mpi_mutex;
std::atomic<bool> g_serialize_mpi{false};
bool g_tandem_initialised_mpi = false;
// Shut-down's deadline, read at start-up: reading the environment again there could throw,
// and shut-down runs in destructors.
std::chrono::milliseconds g_lifetime_deadline{0};
std::atomic<bool> g_in_finalize{false};

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

}  // namespace

void check_thread_level() {
  TANDEM_CHECK(mpi_running(),
               "MPI is not running (not initialised, or already finalised): call "
               "tandem::dist::init_process_group() or MPI_Init_thread first");
  int provided = MPI_THREAD_SINGLE;
  TANDEM_CHECK_MPI(MPI_Query_thread(&provided));
  TANDEM_CHECK(provided >= MPI_THREAD_SERIALIZED,
               "MPI granted " << thread_level_name(provided)
                              << ", but the process group's communication thread needs at least "
                                 "MPI_THREAD_SERIALIZED: initialise MPI with MPI_Init_thread asking for "
                                 "MPI_THREAD_MULTIPLE, with an MPI library built with thread support");
  g_serialize_mpi.store(provided < MPI_THREAD_MULTIPLE);
}

std::unique_lock<std::mutex> lock_mpi() {
  if (g_serialize_mpi.load()) return std::unique_lock<std::mutex>(g_mpi_mutex);
  return {};
}

bool mpi_abort_possible() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  return initialised && (mpi_running() || g_in_finalize.load());
}

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

void ensure_mpi_initialized(int launch_rank) {
  int initialised = 0, finalised = 0;
  TANDEM_CHECK_MPI(MPI_Initialized(&initialised));
  TANDEM_CHECK_MPI(MPI_Finalized(&finalised));
  TANDEM_CHECK(!finalised, "MPI has already been finalised; it cannot be initialised again");
  if (!initialised) {
    g_lifetime_deadline = default_timeout();
    int provided = MPI_THREAD_SINGLE;
    {
      // MPI_Init_thread waits for every rank of the job, and nothing can interrupt it.
      PhaseWatchdog watchdog("start-up (MPI_Init_thread)", startup_timeout(), launch_rank,
                             "a rank is frozen or was never started", kStartupTimeoutEnvVar);
      TANDEM_CHECK_MPI(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    }
    g_tandem_initialised_mpi = true;
  }
  check_thread_level();
}

namespace {

std::mutex g_registry_mu;
std::vector<std::weak_ptr<StoppableGroup>> g_registry;

// Stops every live group. Also runs inside MPI_Finalize (an attribute of MPI_COMM_SELF is
// deleted first thing there), so a program that finalises MPI itself with work still queued
// or stuck drains or ends the job instead of hanging in MPI_Finalize.
void stop_all_groups() {
  std::vector<std::shared_ptr<StoppableGroup>> live;
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    for (auto& w : g_registry)
      if (auto s = w.lock()) live.push_back(std::move(s));
    g_registry.clear();
  }
  for (auto& s : live) s->stop();
}

int on_finalize(MPI_Comm, int, void*, void*) {
  g_in_finalize.store(true);
  try {
    stop_all_groups();
  } catch (const std::exception& e) {
    write_stderr_line(std::string("tandem: stopping process groups in MPI_Finalize: ") + e.what());
  }
  g_in_finalize.store(false);
  return MPI_SUCCESS;
}

void install_finalize_hook() {
  MpiLock lock;
  int keyval = MPI_KEYVAL_INVALID;
  TANDEM_CHECK_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &keyval, nullptr));
  TANDEM_CHECK_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr));
}

std::once_flag g_hook_once;

}  // namespace

void register_group(const std::shared_ptr<StoppableGroup>& group) {
  std::call_once(g_hook_once, install_finalize_hook);
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::erase_if(g_registry, [](const std::weak_ptr<StoppableGroup>& w) { return w.expired(); });
  g_registry.push_back(group);
}

void shutdown_mpi() {
  stop_all_groups();
  if (g_tandem_initialised_mpi && mpi_running()) {
    // MPI_Finalize waits for every rank to reach its own, and nothing can interrupt it.
    PhaseWatchdog watchdog("shut-down (MPI_Finalize)", g_lifetime_deadline, process_rank(),
                           "a rank is frozen or never reached its own shut-down");
    MpiLock lock;
    TANDEM_CHECK_MPI(MPI_Finalize());
  }
}

}  // namespace detail

}  // namespace tandem::dist
