// Shared-memory probe, run by shared_memory_choice_test.sh under mpirun: wraps a small model
// and runs one synchronised backward, printing each rank's pid and whether the Reducer's
// buckets are shared memory. Under run_main, an Error on every rank ends the job at once.
#include <unistd.h>

#include <cstdio>

#include "autograd/ops.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"

using namespace tandem;

namespace {

int probe(int, char**) {
  dist::DistributedContext context;
  auto world = context.world();
  std::printf("probe: rank %d pid %d\n", world->rank(), static_cast<int>(getpid()));
  std::fflush(stdout);
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
