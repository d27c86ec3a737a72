// Bucket-timeout probe, run by run_probe.cmake under `mpirun -np 2` with
// TANDEM_COLLECTIVE_TIMEOUT_S=2. Both ranks agree on the backward (explicit
// prepare_for_backward), then rank 1 never runs it: rank 0's bucket allreduce must time
// out with an error that names the bucket's parameters, and the job must end non-zero.
#include <chrono>
#include <cstdio>
#include <thread>

#include "autograd/ops.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"

using namespace tandem;

int main() {
  dist::DistributedContext context;
  auto world = context.world();
  auto model = std::make_shared<DataParallelModel>();
  Variable weight = model->register_parameter("encoder_weight", ones({4}));
  Variable bias = model->register_parameter("encoder_bias", ones({4}));
  DistributedDataParallel ddp(model, world);
  Variable loss = sum(weight * bias);
  ddp.reducer().prepare_for_backward(loss);
  if (world->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(120));  // mpirun must end this process
    std::printf("probe: rank %d was never torn down\n", world->rank());
    return 0;
  }
  try {
    loss.backward();
    std::printf("probe: the backward completed, which it must not\n");
    return 0;
  } catch (const Error& e) {
    std::printf("probe: backward threw: %s\n", e.what());
    std::fflush(stdout);
    dist::abort_on_timeout(e);
  }
}
