#include "runtime/dist/run_main.h"

#include <mpi.h>

#include <iostream>
#include <stdexcept>
#include <string>

#include "runtime/dist/mpi_lifetime.h"
#include "runtime/dist/process_group.h"
#include "runtime/error.h"

namespace tandem {

namespace {

std::string program_name(int argc, char** argv) {
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) return "program";
  const std::string path = argv[0];
  return path.substr(path.find_last_of('/') + 1);
}

// After the line is printed: with other ranks the job ends now (they may be waiting for
// this rank in a collective); alone, MPI shuts down as at a normal end.
int end_after_error(int status) {
  if (dist::detail::mpi_running()) {
    int size = 1;
    if (MPI_Comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size > 1) dist::abort_job(status);
    dist::shutdown_process_groups();
  }
  return status;
}

}  // namespace

int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn) {
  int status = 1;
  try {
    return fn(argc, argv);
  } catch (const dist::TimeoutError& e) {  // ends the job as every other timeout does
    std::cout.flush();
    write_stderr_line("tandem: ending the job: " + error_line(e, program_name(argc, argv)));
    status = dist::kTimeoutExitCode;
  } catch (const std::exception& e) {
    std::cout.flush();
    write_stderr_line(error_line(e, program_name(argc, argv)));
  } catch (...) {
    std::cout.flush();
    write_stderr_line(error_line(std::runtime_error("an exception that is not a std::exception"),
                                 program_name(argc, argv)));
  }
  try {
    return end_after_error(status);
  } catch (const std::exception& e) {  // MPI's shut-down failed too: said, and still non-zero
    write_stderr_line(error_line(e, program_name(argc, argv)));
    return 1;
  }
}

}  // namespace tandem
