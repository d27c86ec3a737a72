// cuBLAS, opened at its first use instead of linked. CUDA builds only.
//
// Why: loading libcublas.so maps libcublasLt, whose static constructors fault in about
// 200 MB at every process start (0.4-0.8 s on a 2-core VM), CPU runs and `--help` included.
// Opened on demand, only a process that runs a GPU matmul pays, once.
//
// Contract:
// - cublas() is the process's cuBLAS: opened and resolved at the first call (thread-safe),
//   the same object afterwards, never closed (a handle may outlive static destruction). It
//   tries kCublasPath (the toolkit's library found at configure time), then the file name
//   alone (LD_LIBRARY_PATH, the loader's cache).
// - load_cublas(file) opens `file` as dlopen does and resolves every function below; an
//   Error names the file and the loader's reason, or the missing function, and leaves
//   nothing open.
// - The members have the declared types of the cuBLAS functions they point to (cublas_v2.h's
//   names: create is cublasCreate, i.e. cublasCreate_v2).
#pragma once

#include <cublas_v2.h>

#include <string>

namespace tandem::kernels::cuda {

struct CublasLibrary {
  std::string file;  // what was opened: a path or a file name
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSscal) sscal = nullptr;
  decltype(&cublasDscal) dscal = nullptr;
  decltype(&cublasDgemm) dgemm = nullptr;
  // The C function (cublas_api.h also declares an inline C++ overload of the same name).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*,
                            void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
};

const CublasLibrary& cublas();

CublasLibrary load_cublas(const std::string& file);

}  // namespace tandem::kernels::cuda
