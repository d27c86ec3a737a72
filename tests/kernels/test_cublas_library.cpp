// cuBLAS opened at its first use (kernels/cuda/cublas_library.h), in CUDA builds: a process
// that runs no GPU matmul never maps it. No GPU is needed: the library is only opened.
#include <catch2/catch.hpp>

#if TANDEM_HAVE_CUDA

#include <fstream>
#include <string>

#include "kernels/cuda/cublas_library.h"
#include "runtime/error.h"

using namespace tandem;

namespace {

// Whether a file whose name contains `name` is mapped into this process.
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cuBLAS is not mapped until a GPU matmul needs it, and then every function is resolved",
          "[kernels][cuda]") {
  // Each test case runs in a process of its own (tests/CMakeLists.txt), so nothing before
  // this line has asked for cuBLAS: linking it would have mapped it at start.
  CHECK_FALSE(mapped("libcublas"));
  const kernels::cuda::CublasLibrary& library = kernels::cuda::cublas();
  CHECK(mapped("libcublas"));
  CHECK(&kernels::cuda::cublas() == &library);
  CHECK(library.create != nullptr);
  CHECK(library.destroy != nullptr);
  CHECK(library.set_stream != nullptr);
  CHECK(library.set_workspace != nullptr);
  CHECK(library.set_math_mode != nullptr);
  CHECK(library.sscal != nullptr);
  CHECK(library.dscal != nullptr);
  CHECK(library.dgemm != nullptr);
  CHECK(library.gemm_ex != nullptr);
}

TEST_CASE("a cuBLAS that cannot be opened, or lacks a function, is an error naming the file",
          "[kernels][cuda]") {
  CHECK_THROWS_WITH(kernels::cuda::load_cublas("/nonexistent/libcublas.so.99"),
                    Catch::Contains("cannot open /nonexistent/libcublas.so.99"));
  // A library that opens but is not cuBLAS: the C library.
  CHECK_THROWS_WITH(kernels::cuda::load_cublas("libc.so.6"),
                    Catch::Contains("libc.so.6 has no function cublasCreate_v2"));
}

#endif  // TANDEM_HAVE_CUDA
