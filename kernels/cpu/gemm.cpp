// GEMM through Eigen: maps our row-major buffers without copying; float32 products whose
// output is a matrix go to oneDNN when the CPU backend is onednn (cpu/gemm_onednn.h). CUDA
// tensors go to kernels/cuda/gemm.cu (cuBLAS), 16-bit pairs included.
#include "kernels/gemm.h"

#include <Eigen/Core>

#include "kernels/cpu/gemm_onednn.h"
#include "kernels/dispatch.h"
#include "kernels/kernel_recorder.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/gemm_cuda.h"
#endif

namespace tandem::kernels {

namespace {

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <typename T>
void gemm_cpu(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, T alpha, T beta) {
  Eigen::Map<const RowMajor<T>> A(a.data<T>(), a.size(0), a.size(1));
  Eigen::Map<const RowMajor<T>> B(b.data<T>(), b.size(0), b.size(1));
  Eigen::Map<RowMajor<T>> C(c.data<T>(), c.size(0), c.size(1));
  if (beta == T(0)) {
    // noalias: C never overlaps A or B here, so Eigen may write C directly.
    if (!ta && !tb)
      C.noalias() = alpha * (A * B);
    else if (ta && !tb)
      C.noalias() = alpha * (A.transpose() * B);
    else if (!ta && tb)
      C.noalias() = alpha * (A * B.transpose());
    else
      C.noalias() = alpha * (A.transpose() * B.transpose());
  } else {
    if (beta != T(1)) C *= beta;
    if (!ta && !tb)
      C.noalias() += alpha * (A * B);
    else if (ta && !tb)
      C.noalias() += alpha * (A.transpose() * B);
    else if (!ta && tb)
      C.noalias() += alpha * (A * B.transpose());
    else
      C.noalias() += alpha * (A.transpose() * B.transpose());
  }
}

}  // namespace

GemmShape check_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c) {
  const char* op = "matmul";
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  check_defined(op, c, "output");
  TANDEM_CHECK(a.dim() == 2 && b.dim() == 2,
               op << ": needs 2-D operands, got " << shape_str(a.shape()) << " and " << shape_str(b.shape()));
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
  int64_t m = ta ? a.size(1) : a.size(0);
  int64_t k = ta ? a.size(0) : a.size(1);
  int64_t kb = tb ? b.size(1) : b.size(0);
  int64_t n = tb ? b.size(0) : b.size(1);
  TANDEM_CHECK(k == kb, op << ": inner dimensions differ, " << shape_str(a.shape()) << (ta ? "^T" : "")
                           << " x " << shape_str(b.shape()) << (tb ? "^T" : ""));
  TANDEM_CHECK(c.dim() == 2 && c.size(0) == m && c.size(1) == n,
               op << ": output " << shape_str(c.shape()) << " should be [" << m << ", " << n << "]");
  TANDEM_CHECK(c.dtype() == accumulate_dtype(a.dtype()),
               op << ": output dtype " << dtype_name(c.dtype()) << " should be "
                  << dtype_name(accumulate_dtype(a.dtype())) << " for " << dtype_name(a.dtype())
                  << " operands");
  check_same_device(op, a, c);
  return {m, k, n};
}

void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  if (is_16bit_float(a.dtype())) {  // reduced precision (gemm.h): cuBLAS or oneDNN, else widened
    const GemmShape s = check_gemm(a, ta, b, tb, c);
    if (a.device().is_cpu() && !cpu::onednn_gemm(a, ta, b, tb, c, alpha, beta))
      return gemm(a.to(DType::f32), ta, b.to(DType::f32), tb, c, alpha,
                  beta);  // widened: recorded as float32
    if (kernel_recording()) record_gemm({s.m, s.n, s.k, ta, tb, a.dtype()});
    TANDEM_CUDA_ROUTE(a, cuda::gemm(a, ta, b, tb, c, alpha, beta));
    return;
  }
  if (kernel_recording()) {
    const GemmShape s = check_gemm(a, ta, b, tb, c);
    record_gemm({s.m, s.n, s.k, ta, tb, a.dtype()});
  }
  TANDEM_CUDA_ROUTE(a, cuda::gemm(a, ta, b, tb, c, alpha, beta));
  check_gemm(a, ta, b, tb, c);
  require_cpu("matmul", a);
  if (cpu::onednn_gemm(a, ta, b, tb, c, alpha, beta)) return;  // float32 matrix outputs
  dispatch_float("matmul", a.dtype(), [&]<typename T>() {
    gemm_cpu<T>(a, ta, b, tb, c, static_cast<T>(alpha), static_cast<T>(beta));
  });
}

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  TANDEM_CHECK(a.dim() == 2 && b.dim() == 2,
               "matmul: needs 2-D operands, got " << shape_str(a.shape()) << " and " << shape_str(b.shape()));
  int64_t m = ta ? a.size(1) : a.size(0);
  int64_t n = tb ? b.size(0) : b.size(1);
  Tensor c = Tensor::empty({m, n}, accumulate_dtype(a.dtype()), a.device());
  gemm(a, ta, b, tb, c, 1.0, 0.0);
  return c;
}

}  // namespace tandem::kernels
