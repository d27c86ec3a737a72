// Non-finite scrubbing on the CPU: the twin of kernels/cuda/non_finite.cu.
#include "kernels/non_finite.h"

#include <cmath>

#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/non_finite_cuda.h"
#endif

namespace tandem::kernels {

int64_t scrub_non_finite_(Tensor& t, double limit) {
  const char* op = "scrub_non_finite_";
  check_defined(op, t, "tensor");
  TANDEM_CUDA_ROUTE(t, cuda::scrub_non_finite_(t, limit));
  require_cpu(op, t);
  int64_t replaced = 0;
  dispatch_float(op, t.dtype(), [&]<typename T>() {
    const T big = static_cast<T>(limit);
    T* x = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (std::isnan(x[i])) {
        x[i] = T(0);
      } else if (std::isinf(x[i])) {
        x[i] = x[i] > 0 ? big : -big;
      } else {
        continue;
      }
      ++replaced;
    }
  });
  return replaced;
}

}  // namespace tandem::kernels
