// CUDA memory for tensors: an allocator and the host<->device copy hook.
//
// Contract: install_cuda_memory() registers, for CUDA tensors, an allocator that calls
// cudaMalloc/cudaFree on the tensor's device and the copy used by Tensor::copy_/to(Device)
// (cudaMemcpy, synchronous). It leaves alone whatever was registered before, so a
// caching allocator installed first keeps its place. Idempotent. CUDA builds only.
#pragma once

namespace tandem {

void install_cuda_memory();

}  // namespace tandem
