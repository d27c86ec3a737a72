// Factor-2 resampling. Each op's backward is the other's forward up to a scale, so two
// kernels serve all four: one sums each 2x2 block, one repeats a value into it.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/pool_cuda.h"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

// out [planes, h, w] = s * in [planes, 2h, 2w] summed over each 2x2 block. Output row r
// (plane p, row i, so r = p h + i) reads input rows 2r and 2r + 1.
template <typename T>
__global__ void block_sum_kernel(const T* in, T* out, int64_t count, int64_t w, T s) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = idx / w, j = idx % w;
    const T* r0 = in + 2 * r * 2 * w + 2 * j;
    const T* r1 = r0 + 2 * w;
    out[idx] = s * (r0[0] + r0[1] + r1[0] + r1[1]);
  }
}

// out [planes, 2h, 2w] = s * in [planes, h, w] repeated over each 2x2 block: one thread
// per input pixel (row r = p h + i, column j) writes output rows 2r and 2r + 1.
template <typename T>
__global__ void block_repeat_kernel(const T* in, T* out, int64_t count, int64_t w, T s) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t r = idx / w, j = idx % w;
    const T v = s * in[idx];
    T* o0 = out + 2 * r * 2 * w + 2 * j;
    T* o1 = o0 + 2 * w;
    o0[0] = o0[1] = o1[0] = o1[1] = v;
  }
}

// The CPU twins' argument checks and messages.
void check_nchw(const char* op, const Tensor& x, const char* what) {
  check_defined(op, x, what);
  TANDEM_CHECK(x.dim() == 4, op << ": needs a 4-D [N, C, H, W] " << what << ", got " << shape_str(x.shape()));
  require_cuda(op, x);
}

void check_even(const char* op, const Tensor& x, const char* what) {
  TANDEM_CHECK(x.size(2) % 2 == 0 && x.size(3) % 2 == 0,
               op << ": needs even H and W, got " << what << " " << shape_str(x.shape()));
}

Tensor block_sum(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2) / 2, w = in.size(3) / 2;
  Tensor out = Tensor::empty({in.size(0), in.size(1), h, w}, in.dtype(), in.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(in);
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    block_sum_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(in), mut_ptr<T>(out), count, w,
                                                                   static_cast<T>(scale));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor block_repeat(const char* op, const Tensor& in, double scale) {
  const int64_t h = in.size(2), w = in.size(3);
  Tensor out = Tensor::empty({in.size(0), in.size(1), 2 * h, 2 * w}, in.dtype(), in.device());
  const int64_t count = in.numel();
  if (count == 0) return out;
  set_device(in);
  dispatch_float(op, in.dtype(), [&]<typename T>() {
    block_repeat_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(in), mut_ptr<T>(out), count, w,
                                                                      static_cast<T>(scale));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

Tensor upsample_nearest2x(const Tensor& x) {
  check_nchw("upsample_nearest2x", x, "input");
  return block_repeat("upsample_nearest2x", x, 1.0);
}

Tensor upsample_nearest2x_backward(const Tensor& grad) {
  const char* op = "upsample_nearest2x_backward";
  check_nchw(op, grad, "gradient");
  check_even(op, grad, "gradient");
  return block_sum(op, grad, 1.0);
}

Tensor avg_pool2x(const Tensor& x) {
  const char* op = "avg_pool2x";
  check_nchw(op, x, "input");
  check_even(op, x, "input");
  return block_sum(op, x, 0.25);
}

Tensor avg_pool2x_backward(const Tensor& grad) {
  check_nchw("avg_pool2x_backward", grad, "gradient");
  return block_repeat("avg_pool2x_backward", grad, 0.25);
}

}  // namespace tandem::kernels::cuda
