// Timeout probe, run by run_timeout_probe.cmake under `mpirun -np 2` with
// TANDEM_COLLECTIVE_TIMEOUT_S=2. Rank 1 skips the allreduce rank 0 issues (and sleeps far
// longer than the test allows), so rank 0's wait() must time out and end the job:
//   catch     rank 0 catches the Error, prints it and calls abort_on_timeout
//   uncaught  the Error escapes main (std::terminate)
//   destroy   rank 0 catches and prints the Error, then lets the DistributedContext go:
//             destroying a group stuck in a collective must end the job, not hang
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "runtime/dist/process_group.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "catch") != 0 && std::strcmp(mode, "uncaught") != 0 &&
      std::strcmp(mode, "destroy") != 0) {
    std::fprintf(stderr, "usage: timeout_probe catch|uncaught|destroy\n");
    return 2;
  }
  DistributedContext context;
  auto world = context.world();
  std::printf("probe: rank %d of %d, mode %s, timeout %lld ms\n", world->rank(), world->size(), mode,
              static_cast<long long>(world->timeout().count()));
  std::fflush(stdout);
  Tensor t = Tensor::full({1000}, 1.0);
  world->allreduce(t, ReduceOp::sum, "warm-up")->wait();  // both ranks are up and in step

  if (world->rank() != 0) {
    // Skips the collective below; mpirun must end this process when rank 0 aborts.
    std::this_thread::sleep_for(std::chrono::seconds(120));
    std::printf("probe: rank %d was never torn down\n", world->rank());
    return 0;
  }

  auto start = std::chrono::steady_clock::now();
  auto work = world->allreduce(t, ReduceOp::sum, "bucket 3 of phase D");
  if (std::strcmp(mode, "uncaught") == 0) {
    work->wait();
    return 0;
  }
  try {
    work->wait();
    std::printf("probe: the allreduce completed, which it must not\n");
    return 0;
  } catch (const Error& e) {
    std::printf("probe: wait() threw after %.2f s: %s\n", seconds_since(start), e.what());
    std::fflush(stdout);
    if (std::strcmp(mode, "catch") == 0) abort_on_timeout(e);
  }
  // destroy: the context's destructor meets the stuck group.
  return 0;
}
