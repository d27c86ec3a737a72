// Opens cuBLAS on demand (cublas_library.h).
#include "kernels/cuda/cublas_library.h"

#include <dlfcn.h>

#include "runtime/error.h"

#ifndef TANDEM_CUBLAS_PATH
#error "TANDEM_CUBLAS_PATH (the toolkit's libcublas.so.<major>) is set by kernels/CMakeLists.txt"
#endif
#ifndef TANDEM_CUBLAS_FILE
#error "TANDEM_CUBLAS_FILE (libcublas.so.<major>) is set by kernels/CMakeLists.txt"
#endif

namespace tandem::kernels::cuda {

namespace {

// cublas_v2.h maps each name to its exported symbol by a macro (cublasCreate is
// cublasCreate_v2): the name is expanded before it is spelled.
#define TANDEM_CUBLAS_SPELL(name) #name
#define TANDEM_CUBLAS_SYMBOL(name) TANDEM_CUBLAS_SPELL(name)

template <typename Function>
void resolve(void* library, const std::string& file, const char* symbol, Function& out) {
  dlerror();
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    const char* reason = dlerror();
    dlclose(library);
    TANDEM_FAIL("cuBLAS: " << file << " has no function " << symbol << " ("
                           << (reason != nullptr ? reason : "null address") << ")");
  }
  out = reinterpret_cast<Function>(address);
}

CublasLibrary open_first_found() {
  try {
    return load_cublas(TANDEM_CUBLAS_PATH);
  } catch (const Error& at_configured_path) {
    try {
      return load_cublas(TANDEM_CUBLAS_FILE);
    } catch (const Error& by_name) {
      TANDEM_FAIL("cuBLAS could not be opened, which a GPU matmul needs: " << at_configured_path.message()
                                                                           << "; " << by_name.message());
    }
  }
}

}  // namespace

CublasLibrary load_cublas(const std::string& file) {
  dlerror();
  void* library = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    TANDEM_FAIL("cuBLAS: cannot open " << file << " (" << (reason != nullptr ? reason : "no reason given")
                                       << ")");
  }
  CublasLibrary l;
  l.file = file;
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasCreate), l.create);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasDestroy), l.destroy);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasSetStream), l.set_stream);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasSetWorkspace), l.set_workspace);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasSetMathMode), l.set_math_mode);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasSscal), l.sscal);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasDscal), l.dscal);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasDgemm), l.dgemm);
  resolve(library, file, TANDEM_CUBLAS_SYMBOL(cublasGemmEx), l.gemm_ex);
  return l;  // the library stays open: its functions are in use for the rest of the process
}

const CublasLibrary& cublas() {
  static const CublasLibrary library = open_first_found();
  return library;
}

}  // namespace tandem::kernels::cuda
