#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/dist/phase_watchdog.h"
#include "runtime/dist/process_group.h"

using namespace tandem::dist;
using detail::PhaseWatchdog;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct ChildResult {
  int exit_code = -1;  // -1: did not exit normally
  std::string out;     // stdout and stderr together
  double seconds = 0;
};

// Runs `body` in a forked child whose stdout and stderr go to one pipe (so stdout is fully
// buffered, as under mpirun), and returns how the child ended and what it wrote.
template <typename Body>
ChildResult run_in_child(Body body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stdout);
  std::fflush(stderr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[1]);
    body();
    std::_Exit(0);
  }
  close(fds[1]);
  ChildResult result;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) result.out.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  result.seconds = seconds_since(start);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

}  // namespace

TEST_CASE("phase watchdog: a phase that ends in time costs no wait for the deadline", "[dist][watchdog]") {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    PhaseWatchdog watchdog("start-up (test)", std::chrono::seconds(2), 0, "never");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Five phases of 1 ms each: their deadlines (2 s each) must not show.
  CHECK(seconds_since(start) < 1.0);
}

TEST_CASE("phase watchdog: a phase past its deadline ends the process with one named line",
          "[dist][watchdog]") {
  ChildResult child = run_in_child([] {
    std::printf("output written before the phase\n");  // buffered: the pipe is not a terminal
    PhaseWatchdog watchdog("shut-down (test phase)", std::chrono::milliseconds(200), 3, "a rank is frozen");
    std::this_thread::sleep_for(std::chrono::seconds(20));
    std::printf("\nthe phase outlived its watchdog\n");
  });
  INFO("child output: " << child.out);
  CHECK(child.exit_code == kTimeoutExitCode);
  CHECK(child.seconds >= 0.2);
  CHECK(child.seconds < 10.0);
  CHECK(child.out ==
        "output written before the phase\n"
        "tandem: ending the job: [rank 3] shut-down (test phase) did not finish within 0.2 s "
        "(TANDEM_COLLECTIVE_TIMEOUT_S): a rank is frozen\n");
}

TEST_CASE("phase watchdog: without a known rank the line names none", "[dist][watchdog]") {
  ChildResult child = run_in_child([] {
    PhaseWatchdog watchdog("start-up (test phase)", std::chrono::milliseconds(100), -1, "no rank");
    std::this_thread::sleep_for(std::chrono::seconds(20));
  });
  INFO("child output: " << child.out);
  CHECK(child.exit_code == kTimeoutExitCode);
  CHECK(child.out ==
        "tandem: ending the job: start-up (test phase) did not finish within 0.1 s "
        "(TANDEM_COLLECTIVE_TIMEOUT_S): no rank\n");
}
