// tandem-train: the mpirun-launched GAN training program (see trainer.h and --help).
#include <iostream>

#include "models/train/train_options.h"
#include "models/train/trainer.h"
#include "runtime/dist/process_group.h"

namespace {

using namespace tandem;

// One line per failing rank, for a person reading the merged output of every rank: the
// rank (and host) first, then what went wrong, then where ("[at models/data/dataset.cpp:127]").
// Before the rank is known: "tandem-train: error: " and the error as it is.
void print_error(const std::exception& e) {
  std::cout.flush();
  const std::string label = process_label();
  const auto* error = dynamic_cast<const Error*>(&e);
  if (label.empty()) {
    write_stderr_line(std::string("tandem-train: error: ") + e.what());
  } else if (error) {
    write_stderr_line(label + error->message() + " [at " + error->file() + ":" +
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
    if (context.world()->size() > 1) dist::abort_job(1);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  models::TrainOptions options;
  try {
    options = models::parse_train_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const models::UsageError& e) {
    write_stderr_line(std::string("tandem-train: ") + e.what());  // one write: ranks' lines stay whole
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
  } catch (...) {  // nothing escapes main: no "terminate called" and abort backtrace
    write_stderr_line("tandem-train: error: " + process_label() +
                      "an exception that is not a std::exception");
    return 1;
  }
}
