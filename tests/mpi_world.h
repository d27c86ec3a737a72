// The world group of a multi-rank test program (a suite under catch_mpi_main.cpp).
//
// Contract: world() makes the group over MPI_COMM_WORLD on its first call
// (dist::init_process_group(), the MPI backend, the default collective timeout) and returns
// that same group to every later call, from every test case.
#pragma once

#include <memory>

#include "runtime/dist/process_group.h"

namespace tandem::testing {

inline std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group();
  return group;
}

}  // namespace tandem::testing
