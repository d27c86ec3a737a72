// Factor-2 resampling. Each op's backward is the other's forward up to a scale: the
// adjoint of nearest upsampling sums each 2x2 block, the adjoint of 2x2 averaging spreads a
// quarter of the gradient to each pixel of the block.
#include "kernels/pool.h"

#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/pool_cuda.h"
#endif

namespace tandem::kernels {

namespace {

void check_nchw(const char* op, const Tensor& x, const char* what) {
  check_defined(op, x, what);
  TANDEM_CHECK(x.dim() == 4, op << ": needs a 4-D [N, C, H, W] " << what << ", got " << shape_str(x.shape()));
  require_cpu(op, x);
}

// out [planes, h, w] = scale * in [planes, 2h, 2w] summed over each 2x2 block.
Tensor block_sum(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2) / 2, w = in.size(3) / 2, planes = in.size(0) * in.size(1);
  Tensor out = Tensor::empty({in.size(0), in.size(1), h, w}, in.dtype(), in.device());
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const T s = static_cast<T>(scale);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < h; ++i) {
        const T* r0 = src + (p * 2 * h + 2 * i) * 2 * w;
        const T* r1 = r0 + 2 * w;
        T* o = dst + (p * h + i) * w;
        for (int64_t j = 0; j < w; ++j) o[j] = s * (r0[2 * j] + r0[2 * j + 1] + r1[2 * j] + r1[2 * j + 1]);
      }
  });
  return out;
}

// out [planes, 2h, 2w] = scale * in [planes, h, w] repeated over each 2x2 block.
Tensor block_repeat(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2), w = in.size(3), planes = in.size(0) * in.size(1);
  Tensor out = Tensor::empty({in.size(0), in.size(1), 2 * h, 2 * w}, in.dtype(), in.device());
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    const T* src = in.data<T>();
    T* dst = out.data<T>();
    const T s = static_cast<T>(scale);
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t i = 0; i < h; ++i) {
        const T* r = src + (p * h + i) * w;
        T* o0 = dst + (p * 2 * h + 2 * i) * 2 * w;
        T* o1 = o0 + 2 * w;
        for (int64_t j = 0; j < w; ++j) {
          const T v = s * r[j];
          o0[2 * j] = o0[2 * j + 1] = o1[2 * j] = o1[2 * j + 1] = v;
        }
      }
  });
  return out;
}

void check_even(const char* op, const Tensor& x, const char* what) {
  TANDEM_CHECK(x.size(2) % 2 == 0 && x.size(3) % 2 == 0,
               op << ": needs even H and W, got " << what << " " << shape_str(x.shape()));
}

}  // namespace

Tensor upsample_nearest2x(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::upsample_nearest2x(x));
  check_nchw("upsample_nearest2x", x, "input");
  return block_repeat("upsample_nearest2x", x, 1.0);
}

Tensor upsample_nearest2x_backward(const Tensor& grad) {
  TANDEM_CUDA_ROUTE(grad, cuda::upsample_nearest2x_backward(grad));
  const char* op = "upsample_nearest2x_backward";
  check_nchw(op, grad, "gradient");
  check_even(op, grad, "gradient");
  return block_sum(op, grad, 1.0);
}

Tensor avg_pool2x(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::avg_pool2x(x));
  const char* op = "avg_pool2x";
  check_nchw(op, x, "input");
  check_even(op, x, "input");
  return block_sum(op, x, 0.25);
}

Tensor avg_pool2x_backward(const Tensor& grad) {
  TANDEM_CUDA_ROUTE(grad, cuda::avg_pool2x_backward(grad));
  check_nchw("avg_pool2x_backward", grad, "gradient");
  return block_repeat("avg_pool2x_backward", grad, 0.25);
}

}  // namespace tandem::kernels
