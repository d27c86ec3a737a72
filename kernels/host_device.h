// TANDEM_HOST_DEVICE: marks a function that the CPU twins and the CUDA kernels share
// (__host__ __device__ under nvcc, nothing under the host compiler).
#pragma once

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif
