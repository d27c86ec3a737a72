// Freeze probe, run by run_freeze_probe.cmake under `mpirun -np 2` with a small
// TANDEM_COLLECTIVE_TIMEOUT_S (1 or 2 s). The rank named by TANDEM_PROBE_FREEZE_RANK
// freezes (sleeps far longer than the test allows) at the phase given:
//   startup   before MPI start-up (DistributedContext), so the other ranks wait in
//             MPI_Init_thread
//   shutdown  after a final barrier, before MPI shut-down (the DistributedContext's end),
//             so the other ranks wait in MPI_Finalize
// Under Open MPI 4.1 both calls block until every rank has made its own, so the other ranks
// must end the job at the deadline, naming the phase, instead of hanging.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "runtime/dist/launch_env.h"
#include "runtime/dist/process_group.h"
#include "runtime/env_number.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

constexpr auto kFreeze = std::chrono::seconds(60);

void freeze(int rank, const char* where) {
  std::fprintf(stderr, "probe: rank %d freezes %s\n", rank, where);
  std::fflush(stderr);
  std::this_thread::sleep_for(kFreeze);  // mpirun must end this process before it wakes
  std::fprintf(stderr, "probe: rank %d was never torn down\n", rank);
}

}  // namespace

int main(int argc, char** argv) {
  const char* phase = argc > 1 ? argv[1] : "";
  const bool startup = std::strcmp(phase, "startup") == 0;
  if (!startup && std::strcmp(phase, "shutdown") != 0) {
    std::fprintf(stderr, "usage: TANDEM_PROBE_FREEZE_RANK=r freeze_probe startup|shutdown\n");
    return 2;
  }
  const std::optional<double> frozen = env_number("TANDEM_PROBE_FREEZE_RANK", 0, 1e6, "a rank");
  if (!frozen) {
    std::fprintf(stderr, "freeze_probe: set TANDEM_PROBE_FREEZE_RANK to the rank that freezes\n");
    return 2;
  }
  const int rank = init_from_env().rank;  // MPI is not running yet
  const bool freezes = rank == static_cast<int>(*frozen);

  if (startup && freezes) freeze(rank, "before MPI start-up");
  {
    DistributedContext context;
    auto world = context.world();
    world->barrier("final barrier")->wait();
    std::fprintf(stderr, "probe: rank %d passed the final barrier\n", rank);
    std::fflush(stderr);
    if (!startup && freezes) freeze(rank, "before MPI shut-down");
  }
  std::fprintf(stderr, "probe: rank %d shut down\n", rank);
  return 0;
}
