// SyncBatchNorm mismatch probe, run by run_probe.cmake under `mpirun -np 2` with
// TANDEM_COLLECTIVE_TIMEOUT_S=3. A GAN-like step calls D (with a SyncBatchNorm) twice on
// rank 0, on fakes then on reals, but once on rank 1: rank 0's second forward must time
// out with an error naming the layer's collective, and the job must end non-zero.
#include <chrono>
#include <cstdio>
#include <thread>

#include "autograd/nn.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/process_group.h"

using namespace tandem;

int main() {
  dist::DistributedContext context;
  auto world = context.world();
  auto model = std::make_shared<nn::Module>();
  auto d =
      model->register_module("D", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 4),
                                                                   std::make_shared<nn::BatchNorm1d>(4)));
  nn::convert_sync_batchnorm(*model, world);
  Variable fake(Tensor::ones({2, 3})), real(Tensor::zeros({2, 3}));
  d->forward(fake);  // both ranks: one collective
  if (world->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(120));  // mpirun must end this process
    std::printf("probe: rank %d was never torn down\n", world->rank());
    return 0;
  }
  try {
    d->forward(real);  // rank 0 alone
    std::printf("probe: the second forward completed, which it must not\n");
    return 0;
  } catch (const Error& e) {
    std::printf("probe: forward threw: %s\n", e.what());
    std::fflush(stdout);
    dist::abort_on_timeout(e);
  }
}
