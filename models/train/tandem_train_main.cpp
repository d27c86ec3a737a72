// tandem-train: the mpirun-launched GAN training program (see trainer.h and --help).
#include <iostream>

#include "models/train/train_options.h"
#include "models/train/trainer.h"
#include "runtime/dist/process_group.h"

namespace {

using namespace tandem;

void print_error(const std::exception& e) { std::cerr << "tandem-train: error: " << e.what() << std::endl; }

// Trains; returns the exit status. A failure is printed while MPI is still up (the caller's
// context ends it): once one rank has left MPI_Finalize with a non-zero status, mpirun kills
// the others, printed or not, and where every rank fails (too little data, an unusable --out)
// each must say why.
int train_printing_errors(const models::TrainOptions& options, dist::DistributedContext& context) {
  try {
    models::train(options, context.world(), std::cout);
    return 0;
  } catch (const std::exception& e) {
    print_error(e);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
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
  if (options.backend == "auto")
    backend = options.device == "cuda" ? dist::Backend::nccl : dist::Backend::mpi;
  try {
    dist::DistributedContext context(backend);
    return train_printing_errors(options, context);
  } catch (const std::exception& e) {  // starting or ending MPI and the process group
    print_error(e);
    return 1;
  }
}
