// run_main's probe: rank 1 throws a tandem::Error while rank 0 waits for it in a barrier.
// Under run_main the job must end at once with one line from rank 1 and no terminate or
// abort noise (tests/dist/mpi/CMakeLists.txt lists what the output must and must not hold).
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"
#include "runtime/error.h"

namespace {

int probe(int, char**) {
  tandem::dist::DistributedContext context;
  if (context.world()->rank() == 1) TANDEM_FAIL("probe: rank 1 fails on purpose");
  context.world()->barrier("waiting for rank 1")->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tandem::run_main(argc, argv, probe); }
