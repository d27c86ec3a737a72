#include "runtime/dist/phase_watchdog.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "runtime/dist/process_group.h"

namespace tandem::dist::detail {

namespace {

// The phase may have stopped anywhere, perhaps inside stdio: a stream another thread holds
// is left unflushed rather than waited for.
void flush_unless_busy(FILE* stream) {
  if (ftrylockfile(stream) != 0) return;
  fflush_unlocked(stream);
  funlockfile(stream);
}

// As write_stderr_line, without its fflush(stderr), which would wait for a held stream.
void write_line_to_fd2(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(2, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

PhaseWatchdog::PhaseWatchdog(const std::string& phase, std::chrono::milliseconds deadline, int rank,
                             const std::string& cause, const char* variable) {
  std::ostringstream os;
  os << "tandem: ending the job: ";
  if (rank >= 0) os << "[rank " << rank << "] ";
  os << phase << " did not finish within " << static_cast<double>(deadline.count()) / 1000.0 << " s ("
     << variable << "): " << cause << '\n';
  line_ = os.str();
  thread_ = std::thread([this, deadline] { watch(deadline); });
}

PhaseWatchdog::~PhaseWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void PhaseWatchdog::watch(std::chrono::milliseconds deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, deadline, [this] { return disarmed_; })) return;
  flush_unless_busy(stdout);
  flush_unless_busy(stderr);
  write_line_to_fd2(line_);
  std::_Exit(kTimeoutExitCode);
}

}  // namespace tandem::dist::detail
