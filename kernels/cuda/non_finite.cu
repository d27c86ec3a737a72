// Non-finite scrubbing: one grid-stride kernel replaces NaN and +-Inf and counts them into a
// device counter, read back once.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/non_finite_cuda.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T>
__global__ void scrub_kernel(T* x, int64_t n, T limit, unsigned long long* replaced) {
  unsigned long long mine = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const T v = x[i];
    if (isnan(v)) {
      x[i] = T(0);
      ++mine;
    } else if (isinf(v)) {
      x[i] = v > T(0) ? limit : -limit;
      ++mine;
    }
  }
  if (mine != 0) atomicAdd(replaced, mine);
}

}  // namespace

int64_t scrub_non_finite_(Tensor& t, double limit) {
  const char* op = "scrub_non_finite_";
  require_cuda(op, t);
  const int64_t n = t.numel();
  if (n == 0) return 0;
  set_device(t);
  Tensor replaced = Tensor::zeros({1}, DType::i64, t.device());
  dispatch_float(op, t.dtype(), [&]<typename T>() {
    scrub_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(mut_ptr<T>(t), n, static_cast<T>(limit),
                                                           mut_ptr<unsigned long long>(replaced));
    TANDEM_CHECK_LAUNCH();
  });
  return replaced.to(Device::cpu()).data<int64_t>()[0];
}

}  // namespace tandem::kernels::cuda
