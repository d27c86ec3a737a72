// A user's main, wrapped so that a failure ends the job with one readable line per rank.
//
// Contract:
// - run_main(argc, argv, fn) returns fn(argc, argv). An exception escaping fn (a
//   tandem::Error, another std::exception, anything else) is printed as one line on stderr
//   (error_line in runtime/error.h: "[rank r] <message> [at <file>:<line>]"; before a rank
//   is known "<program>: error: ..."), never as "terminate called after throwing ...". A
//   dist::TimeoutError ends the job as every timeout does: the line starts with "tandem:
//   ending the job: " and the exit status is dist::kTimeoutExitCode (else 1).
//   Then, while MPI runs with more than one rank, the job ends at once through
//   dist::abort_job(1) (the other ranks may be waiting for this one in a collective: they
//   get a moment to print their own line, then the job ends, non-zero, with no backtrace);
//   with one rank MPI is shut down and run_main returns 1.
// - A DistributedContext destroyed by an exception in flight leaves MPI up (see
//   process_group.h), so run_main can still end the job through MPI_Abort.
// - Use: int main(int argc, char** argv) { return tandem::run_main(argc, argv, my_main); }
#pragma once

#include <functional>

namespace tandem {

int run_main(int argc, char** argv, const std::function<int(int, char**)>& fn);

}  // namespace tandem
