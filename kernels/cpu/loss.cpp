// Loss kernels. bce_with_logits never forms log(sigmoid(x)): for |x| large that is
// log(0) = -inf in float32, while the stable form stays exact.
#include "kernels/loss.h"

#include <algorithm>
#include <cmath>

#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/loss_cuda.h"
#endif

namespace tandem::kernels {

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets) {
  TANDEM_CUDA_ROUTE(logits, cuda::bce_with_logits(logits, targets));
  const char* op = "bce_with_logits";
  check_same_layout(op, logits, "logits", targets, "targets");
  Tensor out = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    const T* px = logits.data<T>();
    const T* pt = targets.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = logits.numel(); i < n; ++i) {
      T x = px[i];
      po[i] = std::max(x, T(0)) - x * pt[i] + std::log1p(std::exp(-std::abs(x)));
    }
  });
  return out;
}

Tensor bce_with_logits_backward(const Tensor& grad, const Tensor& logits, const Tensor& targets) {
  TANDEM_CUDA_ROUTE(logits, cuda::bce_with_logits_backward(grad, logits, targets));
  const char* op = "bce_with_logits_backward";
  check_same_layout(op, logits, "logits", targets, "targets");
  check_same_operands(op, grad, "gradient", logits, "logits");
  Tensor out = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    const T* px = logits.data<T>();
    const T* pt = targets.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = logits.numel(); i < n; ++i) {
      T x = px[i];
      T s;
      if (x >= T(0)) {
        s = T(1) / (T(1) + std::exp(-x));
      } else {
        T e = std::exp(x);
        s = e / (T(1) + e);
      }
      po[i] = pg[i] * (s - pt[i]);
    }
  });
  return out;
}

}  // namespace tandem::kernels
