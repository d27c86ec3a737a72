// Multi-rank GPU suites: skip on every rank, with a message, unless every rank sees a GPU
// (no driver on CI: cudaGetDeviceCount fails with error 35). Ranks may share one GPU: the
// NCCL world group then runs each as a host of its own (runtime/dist/nccl_shared_device.h).
// All ranks agree, or the ones that run would wait for the ones that skip.
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_process_group.h"

namespace tandem::testing {

// Empty when the GPU tests can run; else why they skip. Installs CUDA memory when they can.
inline std::string gpu_skip_reason() {
  static std::string reason = [] {
    int size = 1;
    TANDEM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
    std::string mine;
    cuda::device_available(&mine);
    int skip = mine.empty() ? 0 : 1, any = 0;
    TANDEM_CHECK_MPI(MPI_Allreduce(&skip, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (any && mine.empty()) mine = "another rank has no usable GPU";
    if (!mine.empty()) return "no GPU: " + mine + "; GPU tests skipped";
    install_cuda_memory();
    return std::string();
  }();
  return reason;
}

}  // namespace tandem::testing

#define SKIP_WITHOUT_GPU()                                   \
  do {                                                       \
    std::string why_ = ::tandem::testing::gpu_skip_reason(); \
    if (!why_.empty()) {                                     \
      WARN(why_);                                            \
      return;                                                \
    }                                                        \
  } while (0)
