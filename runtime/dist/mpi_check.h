// TANDEM_CHECK_MPI: the check macro for MPI calls (DESIGN.md §5).
//
// Contract: every MPI call returns an int error code (MPI_SUCCESS is 0 in every
// implementation); a non-zero code throws tandem::Error naming the call, file:line, the
// rank and MPI's own error string. Groups set MPI_ERRORS_RETURN on their communicators so
// errors come back here instead of aborting.
#pragma once

#include <string>

#include "runtime/error.h"

namespace tandem::dist::detail {
// MPI's text for an error code, with the code: "MPI_ERR_COMM: invalid communicator (code 5)".
std::string mpi_error_string(int code);
}  // namespace tandem::dist::detail

#define TANDEM_CHECK_MPI(call)                                                                     \
  do {                                                                                             \
    int tandem_mpi_rc_ = (call);                                                                   \
    if (tandem_mpi_rc_ != 0) {                                                                     \
      ::tandem::detail::throw_error(__FILE__, __LINE__,                                            \
                                    std::string("MPI call failed: ") + #call + " returned " +      \
                                        ::tandem::dist::detail::mpi_error_string(tandem_mpi_rc_)); \
    }                                                                                              \
  } while (0)
