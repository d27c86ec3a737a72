// Shared-memory probe, run by shared_memory_choice_test.sh under mpirun: wraps a small model
// and runs one synchronised backward, printing each rank's pid and whether the Reducer's
// buckets are shared memory. Under run_main, an Error on every rank ends the job at once.
// With the argument create-timeout, rank 0 makes shared buffers that rank 1 never joins:
// its create() times out (2 s) and the job ends.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "autograd/ops.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"
#include "runtime/dist/shared_buffers.h"

using namespace tandem;

namespace {

int probe(int argc, char** argv) {
  dist::DistributedContext context;
  auto world = context.world();
  std::printf("probe: rank %d pid %d\n", world->rank(), static_cast<int>(getpid()));
  std::fflush(stdout);
  if (argc > 1 && std::string(argv[1]) == "create-timeout") {  // rank 1 never joins rank 0's segments
    world->set_timeout(std::chrono::seconds(2));
    if (world->rank() == 0) dist::SharedBuffers::create(*world, 1024, "abandoned buffers");
    std::this_thread::sleep_for(std::chrono::seconds(60));  // the job ends before
    return 1;
  }
  auto model = std::make_shared<DataParallelModel>();
  Variable weight = model->register_parameter("weight", ones({64}));
  DistributedDataParallel ddp(model, world);
  sum(weight * weight).backward();
  const bool averaged = weight.grad().to_vector() == std::vector<double>(64, 2.0);
  std::printf("probe: rank %d shared memory %s, gradient %s\n", world->rank(),
              ddp.reducer().shared_memory() ? "on" : "off", averaged ? "right" : "WRONG");
  return averaged ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, probe); }
