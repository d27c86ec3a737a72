// Main of the GPU suite: without a usable CUDA device it prints why and exits with 77,
// which CTest reports as skipped (SKIP_RETURN_CODE). With one, every block a test
// allocates on the GPU is poisoned (NaN bytes) so an unwritten output element fails.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <iostream>
#include <string>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"

int main(int argc, char** argv) {
  std::string why;
  if (!tandem::cuda::device_available(&why)) {
    std::cout << "no GPU: " << why << "; the CUDA tests are skipped\n";
    return 77;
  }
  tandem::install_cuda_memory();
  tandem::set_cuda_memory_poison(true);
  return Catch::Session().run(argc, argv);
}
