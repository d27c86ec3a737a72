// Bilinear resizing and its adjoint on a GPU: one thread per result element, running the
// CPU twins' formulas (kernels/bilinear_math.h). The adjoint gathers, so it needs no
// atomics and sums in the CPU's order.
#include "kernels/bilinear_math.h"
#include "kernels/cuda/bilinear_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T>
__global__ void resize_kernel(const T* x, T* out, int64_t count, int64_t in_h, int64_t in_w, int64_t out_h,
                              int64_t out_w) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ox = idx % out_w, oy = (idx / out_w) % out_h, plane = idx / (out_w * out_h);
    out[idx] = bilinear_math::resize_at(x + plane * in_h * in_w, in_h, in_w, out_h, out_w, oy, ox);
  }
}

template <typename T>
__global__ void adjoint_kernel(const T* grad, T* out, int64_t count, int64_t in_h, int64_t in_w,
                               int64_t out_h, int64_t out_w) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ix = idx % in_w, iy = (idx / in_w) % in_h, plane = idx / (in_w * in_h);
    out[idx] = bilinear_math::adjoint_at(grad + plane * out_h * out_w, in_h, in_w, out_h, out_w, iy, ix);
  }
}

}  // namespace

Tensor interpolate_bilinear(const Tensor& x, int64_t out_h, int64_t out_w) {
  const char* op = "interpolate_bilinear";
  require_cuda(op, x);
  Tensor out = Tensor::empty({x.size(0), x.size(1), out_h, out_w}, x.dtype(), x.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    resize_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(x), mut_ptr<T>(out), count,
                                                                   x.size(2), x.size(3), out_h, out_w);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor interpolate_bilinear_adjoint(const Tensor& grad, int64_t in_h, int64_t in_w) {
  const char* op = "interpolate_bilinear_adjoint";
  require_cuda(op, grad);
  Tensor out = Tensor::empty({grad.size(0), grad.size(1), in_h, in_w}, grad.dtype(), grad.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    adjoint_kernel<T><<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(grad), mut_ptr<T>(out), count,
                                                                    in_h, in_w, grad.size(2), grad.size(3));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
