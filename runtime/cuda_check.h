// Check macros for CUDA runtime and cuBLAS calls (NCCL's is with the NCCL group in
// runtime/dist/). Include only from CUDA-enabled translation units (TANDEM_HAVE_CUDA).
// Each throws tandem::Error naming the call, the file:line and the rank, with the
// library's own error string.
#pragma once

#include <cuda_runtime.h>

#include "runtime/error.h"
#include "runtime/host_cost.h"

#define TANDEM_CHECK_CUDA(call)                                                                    \
  do {                                                                                             \
    cudaError_t tandem_cuda_rc_ = (call);                                                          \
    if (tandem_cuda_rc_ != cudaSuccess) {                                                          \
      ::tandem::detail::throw_error(                                                               \
          __FILE__, __LINE__,                                                                      \
          std::string("CUDA call failed: ") + #call + ": " + cudaGetErrorString(tandem_cuda_rc_)); \
    }                                                                                              \
  } while (0)

// After every kernel launch: checks it and counts it (runtime/host_cost.h).
#define TANDEM_CHECK_LAUNCH()              \
  do {                                     \
    ::tandem::host_cost::note_launch();    \
    TANDEM_CHECK_CUDA(cudaGetLastError()); \
  } while (0)

#define TANDEM_CHECK_CUBLAS(call)                                                                       \
  do {                                                                                                  \
    int tandem_cublas_rc_ = static_cast<int>(call);                                                     \
    if (tandem_cublas_rc_ != 0) {                                                                       \
      ::tandem::detail::throw_error(__FILE__, __LINE__,                                                 \
                                    std::string("cuBLAS call failed: ") + #call + " returned status " + \
                                        std::to_string(tandem_cublas_rc_));                             \
    }                                                                                                   \
  } while (0)
