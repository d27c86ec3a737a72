// tandem-train: the mpirun-launched GAN training program (see trainer.h and --help).
#include <iostream>

#include "models/train/train_options.h"
#include "models/train/trainer.h"
#include "runtime/dist/process_group.h"

namespace {

using namespace tandem;

// One line per failing rank, for a person reading the merged output of every rank: the
// rank (and host) first, then what went wrong, then where ("[at models/data/dataset.cpp:127]").
// Before the rank is known: "tandem-train: error: " and the error as it is. A collective
// that timed out ends the job as every other timeout does: "tandem: ending the job: " first.
void print_error(const std::exception& e) {
  std::cout.flush();
  const std::string label = process_label();
  const auto* error = dynamic_cast<const Error*>(&e);
  if (label.empty()) {
    write_stderr_line(std::string("tandem-train: error: ") + e.what());
  } else if (error) {
    const char* prefix = dynamic_cast<const dist::TimeoutError*>(&e) ? "tandem: ending the job: " : "";
    write_stderr_line(prefix + label + error->message() + " [at " + error->file() + ":" +
                      std::to_string(error->line()) + "]");
  } else {
    write_stderr_line(label + "error: " + e.what());
  }
}

// Trains; returns the exit status. A failure is printed while MPI is still up. With more
// than one rank the job then ends at once (dist::abort_job, which adds no line of its own):
// the failure may be this rank's alone (a file only it cannot read, a full disk) while the
// others wait for it in a collective. abort_job first gives ranks failing the same way (too
// little data, an unusable --out) a moment to say why too.
int train_printing_errors(const models::TrainOptions& options, dist::DistributedContext& context) {
  try {
    models::train(options, context.world(), std::cout);
    return 0;
  } catch (const std::exception& e) {
    print_error(e);
    const int status = dynamic_cast<const dist::TimeoutError*>(&e) ? dist::kTimeoutExitCode : 1;
    if (context.world()->size() > 1) dist::abort_job(status);
    return status;
  }
}

// --backend auto: NCCL for GPU tensors, MPI for host ones.
dist::Backend process_group_backend(models::TrainBackend backend, DeviceKind device) {
  if (backend == models::TrainBackend::automatic)
    return device == DeviceKind::cuda ? dist::Backend::nccl : dist::Backend::mpi;
  return backend == models::TrainBackend::nccl ? dist::Backend::nccl : dist::Backend::mpi;
}

}  // namespace

int main(int argc, char** argv) {
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
  const dist::Backend backend = process_group_backend(options.backend, options.device);
  try {
    dist::DistributedContext context(backend);
    return train_printing_errors(options, context);
  } catch (const std::exception& e) {  // starting or ending MPI and the process group
    print_error(e);
    return 1;
  } catch (...) {  // nothing escapes main: no "terminate called" and abort backtrace
    write_stderr_line("tandem-train: error: " + process_label() +
                      "an exception that is not a std::exception");
    return 1;
  }
}
