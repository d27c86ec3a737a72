// tandem-train: the mpirun-launched GAN training program (see trainer.h and --help).
#include <mpi.h>

#include <iostream>

#include "models/train_options.h"
#include "models/trainer.h"
#include "runtime/process_group.h"

int main(int argc, char** argv) {
  using namespace tandem;
  models::TrainOptions options;
  try {
    options = models::parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const models::UsageError& e) {
    std::cerr << "tandem-train: " << e.what() << "\n";
    return 2;
  }
  if (options.help) {
    std::cout << models::usage();
    return 0;
  }
  dist::Backend backend = options.backend == "nccl" ? dist::Backend::nccl : dist::Backend::mpi;
  if (options.backend == "auto") backend = options.device == "cuda" ? dist::Backend::nccl : dist::Backend::mpi;
  int size = 1;
  try {
    dist::DistributedContext context(backend);
    size = context.world()->size();
    models::train(options, context.world(), std::cout);
  } catch (const std::exception& e) {
    std::cerr << "tandem-train: error: " << e.what() << std::endl;
    // Other ranks may be waiting in a collective for this one: end the whole job now
    // rather than leave them to their timeout.
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (size > 1 && initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  return 0;
}
