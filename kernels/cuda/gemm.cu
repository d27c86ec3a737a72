// The cuBLAS GEMM of gemm_cuda.h and the per-device handle it runs on.
#include <algorithm>
#include <mutex>
#include <vector>

#include "kernels/cuda/cublas_library.h"
#include "kernels/cuda/gemm_cuda.h"
#include "kernels/gemm.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"

namespace tandem::kernels::cuda {

namespace {

// cuBLAS's default workspace pool may allocate at a capture's first use of a stream, which
// a graph capture refuses; a workspace of our own, set again whenever the stream changes
// (cublasSetStream resets it), keeps cuBLAS off cudaMalloc.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

struct Handle {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
};

}  // namespace

cublasHandle_t cublas_handle(int device) {
  static std::mutex mutex;
  static std::vector<Handle> handles;
  std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<size_t>(device) >= handles.size()) handles.resize(static_cast<size_t>(device) + 1);
  Handle& h = handles[static_cast<size_t>(device)];
  if (h.handle == nullptr) {
    // Never destroyed: a static destructor would run after the driver may have shut down.
    TANDEM_CHECK_CUDA(cudaSetDevice(device));
    TANDEM_CHECK_CUBLAS(cublas().create(&h.handle));
    TANDEM_CHECK_CUBLAS(cublas().set_math_mode(h.handle, CUBLAS_DEFAULT_MATH));
    TANDEM_CHECK_CUDA(cudaMalloc(&h.workspace, kCublasWorkspaceBytes));
    h.stream = reinterpret_cast<cudaStream_t>(-1);  // set below
  }
  const cudaStream_t stream = tandem::cuda::compute_stream();  // a graph's capture stream, or the legacy one
  if (h.stream != stream) {
    TANDEM_CHECK_CUBLAS(cublas().set_stream(h.handle, stream));
    TANDEM_CHECK_CUBLAS(cublas().set_workspace(h.handle, h.workspace, kCublasWorkspaceBytes));
    h.stream = stream;
  }
  return h.handle;
}

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  const GemmShape s = check_gemm(a, ta, b, tb, c);
  const DType dtype = a.dtype();
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::f64 || is_16bit_float(dtype),
               "matmul: dtype " << dtype_name(dtype)
                                << " is not supported (use float32, float64, or bfloat16/float16 pairs)");
  if (s.m == 0 || s.n == 0) return;
  const int device = a.device().index;
  TANDEM_CHECK_CUDA(cudaSetDevice(device));
  cublasHandle_t h = cublas_handle(device);
  if (s.k == 0) {  // an empty sum: C = beta C, and cuBLAS rejects the zero leading dimensions
    if (beta == 0.0) {
      c.zero_();
    } else if (beta != 1.0) {
      const int count = static_cast<int>(c.numel());
      if (c.dtype() == DType::f32) {  // 16-bit operands too: their C is float32
        const float fb = static_cast<float>(beta);
        TANDEM_CHECK_CUBLAS(cublas().sscal(h, count, &fb, static_cast<float*>(c.raw_data()), 1));
      } else {
        TANDEM_CHECK_CUBLAS(cublas().dscal(h, count, &beta, static_cast<double*>(c.raw_data()), 1));
      }
    }
    return;
  }
  TANDEM_CHECK(s.m <= INT32_MAX && s.n <= INT32_MAX && s.k <= INT32_MAX,
               "matmul: dimensions " << s.m << " x " << s.k << " x " << s.n << " exceed cuBLAS's int range");
  // cuBLAS is column-major and a row-major X is the column-major X^T, so C^T = op(B)^T op(A)^T
  // is computed with the operands swapped and the same transpose flags.
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = static_cast<int>(std::max<int64_t>(1, a.size(1)));
  const int ldb = static_cast<int>(std::max<int64_t>(1, b.size(1)));
  if (dtype != DType::f64) {
    // float32 operands, or bfloat16/float16 pairs (gemm.h's reduced precision: tensor cores on
    // the 16-bit operands, float32 accumulation and a float32 C); never TF32 (the handle's
    // default math leaves float32 products in float32).
    const cudaDataType operand = dtype == DType::bf16  ? CUDA_R_16BF
                                 : dtype == DType::f16 ? CUDA_R_16F
                                                       : CUDA_R_32F;
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    TANDEM_CHECK_CUBLAS(cublas().gemm_ex(h, op_b, op_a, n, m, k, &fa, b.raw_data(), operand, ldb,
                                         a.raw_data(), operand, lda, &fb, c.raw_data(), CUDA_R_32F, n,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    TANDEM_CHECK_CUBLAS(cublas().dgemm(
        h, op_b, op_a, n, m, k, &alpha, static_cast<const double*>(b.raw_data()), ldb,
        static_cast<const double*>(a.raw_data()), lda, &beta, static_cast<double*>(c.raw_data()), n));
  }
}

}  // namespace tandem::kernels::cuda
