// tandem-train: the mpirun-launched GAN training program (see trainer.h and --help).
#include <iostream>

#include "models/train/train_options.h"
#include "models/train/trainer.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/run_main.h"

namespace {

using namespace tandem;

// --backend auto: NCCL for GPU tensors, MPI for host ones.
dist::Backend process_group_backend(models::TrainBackend backend, DeviceKind device) {
  if (backend == models::TrainBackend::automatic)
    return device == DeviceKind::cuda ? dist::Backend::nccl : dist::Backend::mpi;
  return backend == models::TrainBackend::nccl ? dist::Backend::nccl : dist::Backend::mpi;
}

// Parses the flags and trains. A failure escaping it (starting MPI, a rank's own file, a
// timeout) is printed by run_main as one line per failing rank, "[rank r] message [at
// file:line]", while MPI is still up; with more than one rank the job then ends at once
// (runtime/dist/run_main.h): the failure may be this rank's alone while the others wait for
// it in a collective.
int run(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args == std::vector<std::string>{"--help-markdown"}) {  // docs/cli.md (scripts/gen_cli_docs.sh)
    models::TrainOptions defaults;
    std::cout << models::train_command_line(defaults).markdown();
    return 0;
  }
  models::TrainOptions options;
  try {
    options = models::parse_train_options(args);
  } catch (const UsageError& e) {
    // One write, so that the ranks' lines stay whole.
    write_stderr_line(std::string("tandem-train: ") + e.what() + " (see --help)");
    return 2;
  }
  if (options.help) {
    models::TrainOptions defaults;
    std::cout << models::train_command_line(defaults).usage();
    return 0;
  }
  dist::DistributedContext context(process_group_backend(options.backend, options.device));
  models::train(options, context.world(), std::cout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tandem::run_main(argc, argv, run); }
