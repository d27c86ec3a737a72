// Loss kernels: bce_with_logits in the stable form of its CPU twin, as functors for the map
// kernels of cuda_kernel_util.cuh; the backward is a three-operand map of its own.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/loss_cuda.h"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T, typename F>
__global__ void ternary_kernel(const T* a, const T* b, const T* c, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(a[i], b[i], c[i]);
}

// clang-format off
struct BceOp {
  template <typename T> __device__ T operator()(T x, T t) const {
    return max_zero(x) - x * t + d_log1p(d_exp(-d_abs(x)));
  }
};
struct BceBackwardOp {
  template <typename T> __device__ T operator()(T g, T x, T t) const { return g * (stable_sigmoid(x) - t); }
};
// clang-format on

}  // namespace

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets) {
  return binary("bce_with_logits", logits, "logits", targets, "targets", BceOp{});
}

Tensor bce_with_logits_backward(const Tensor& grad, const Tensor& logits, const Tensor& targets) {
  const char* op = "bce_with_logits_backward";
  check_same_layout(op, logits, "logits", targets, "targets");
  check_same_operands(op, grad, "gradient", logits, "logits");
  Tensor out = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  const int64_t n = logits.numel();
  if (n == 0) return out;
  set_device(logits);
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    ternary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(grad.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const T*>(targets.raw_data()), static_cast<T*>(out.raw_data()), n, BceBackwardOp{});
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
