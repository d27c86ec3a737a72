// PhaseWatchdog: ends the process when a blocking phase that tandem cannot interrupt (MPI
// start-up, MPI shut-down) outlives its deadline, so that a frozen rank cannot hang the job.
//
// Contract:
// - Constructing one arms it: a thread waits until the watchdog is destroyed or `deadline`
//   has passed, whichever comes first. Destroying it disarms it: the thread is woken and
//   joined at once, so a phase that ends in time costs one thread start and join, never a
//   wait for the deadline.
// - When the deadline passes first, the watchdog flushes stdout and stderr (each only if
//   no other thread holds it, so it cannot block there), writes one line to stderr,
//     "tandem: ending the job: [rank r] <phase> did not finish within <s> s
//      (<variable>): <cause>"
//   ("[rank r] " only when rank >= 0), and ends the process with
//   std::_Exit(kTimeoutExitCode). It does not call MPI_Abort (unusable before MPI_Init
//   returns, and it may block inside MPI_Finalize): the launcher sees a rank end non-zero
//   and tears down the others.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::dist::detail {

class PhaseWatchdog {
 public:
  // phase: "start-up (MPI_Init_thread)"; cause: what the expiry most likely means;
  // variable: the environment variable that sets the deadline.
  PhaseWatchdog(const std::string& phase, std::chrono::milliseconds deadline, int rank,
                const std::string& cause, const char* variable = "TANDEM_COLLECTIVE_TIMEOUT_S");
  ~PhaseWatchdog();
  PhaseWatchdog(const PhaseWatchdog&) = delete;
  PhaseWatchdog& operator=(const PhaseWatchdog&) = delete;

 private:
  void watch(std::chrono::milliseconds deadline);

  std::string line_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace tandem::dist::detail
