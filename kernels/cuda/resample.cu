// upfirdn2d on a GPU: one thread per output, running the CPU twin's formula
// (kernels/resample_math.h), so both sum the same taps in the same order.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/resample_cuda.h"
#include "kernels/dispatch.h"
#include "kernels/resample_math.h"

namespace tandem::kernels::cuda {

namespace {

using resample_math::UpFirDn2dGeometry;

template <typename T>
__global__ void upfirdn2d_kernel(const T* x, const T* f, T* out, int64_t count, UpFirDn2dGeometry g) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ox = idx % g.out_w, oy = (idx / g.out_w) % g.out_h, plane = idx / (g.out_w * g.out_h);
    out[idx] = resample_math::upfirdn2d_at(x + plane * g.in_h * g.in_w, f, g, oy, ox);
  }
}

}  // namespace

Tensor upfirdn2d(const Tensor& x, const Tensor& filter, const UpFirDn2dGeometry& g) {
  const char* op = "upfirdn2d";
  require_cuda(op, x);
  Tensor out = Tensor::empty({x.size(0), x.size(1), g.out_h, g.out_w}, x.dtype(), x.device());
  const int64_t count = out.numel();
  if (count == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    upfirdn2d_kernel<T>
        <<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(x), ptr<T>(filter), mut_ptr<T>(out), count, g);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
