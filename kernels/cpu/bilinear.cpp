// Bilinear resizing and its adjoint (CPU twins): plain loops over the shared formulas
// (kernels/bilinear_math.h).
#include "kernels/bilinear.h"

#include "kernels/bilinear_math.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/bilinear_cuda.h"
#endif

namespace tandem::kernels {

namespace bilinear_detail {

// The checks both devices share: a 4-D input with non-empty planes and sizes >= 1.
void check_resize(const char* op, const Tensor& x, const char* what, int64_t h, int64_t w) {
  check_defined(op, x, what);
  TANDEM_CHECK(x.dim() == 4, op << ": needs a 4-D [N, C, H, W] " << what << ", got " << shape_str(x.shape()));
  TANDEM_CHECK(x.size(2) >= 1 && x.size(3) >= 1,
               op << ": the " << what << " " << shape_str(x.shape()) << " has an empty plane");
  TANDEM_CHECK(h >= 1 && w >= 1, op << ": sizes must be >= 1, got [" << h << ", " << w << "] for " << what
                                    << " " << shape_str(x.shape()));
}

}  // namespace bilinear_detail

Tensor interpolate_bilinear(const Tensor& x, int64_t out_h, int64_t out_w) {
  const char* op = "interpolate_bilinear";
  bilinear_detail::check_resize(op, x, "input", out_h, out_w);
  TANDEM_CUDA_ROUTE(x, cuda::interpolate_bilinear(x, out_h, out_w));
  require_cpu(op, x);
  const int64_t planes = x.size(0) * x.size(1), in_h = x.size(2), in_w = x.size(3);
  Tensor out = Tensor::empty({x.size(0), x.size(1), out_h, out_w}, x.dtype());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t k = 0; k < planes; ++k)
      for (int64_t oy = 0; oy < out_h; ++oy)
        for (int64_t ox = 0; ox < out_w; ++ox)
          po[(k * out_h + oy) * out_w + ox] =
              bilinear_math::resize_at(px + k * in_h * in_w, in_h, in_w, out_h, out_w, oy, ox);
  });
  return out;
}

Tensor interpolate_bilinear_adjoint(const Tensor& grad, int64_t in_h, int64_t in_w) {
  const char* op = "interpolate_bilinear_adjoint";
  bilinear_detail::check_resize(op, grad, "gradient", in_h, in_w);
  TANDEM_CUDA_ROUTE(grad, cuda::interpolate_bilinear_adjoint(grad, in_h, in_w));
  require_cpu(op, grad);
  const int64_t planes = grad.size(0) * grad.size(1), out_h = grad.size(2), out_w = grad.size(3);
  Tensor out = Tensor::empty({grad.size(0), grad.size(1), in_h, in_w}, grad.dtype());
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    for (int64_t k = 0; k < planes; ++k)
      for (int64_t iy = 0; iy < in_h; ++iy)
        for (int64_t ix = 0; ix < in_w; ++ix)
          po[(k * in_h + iy) * in_w + ix] =
              bilinear_math::adjoint_at(pg + k * out_h * out_w, in_h, in_w, out_h, out_w, iy, ix);
  });
  return out;
}

}  // namespace tandem::kernels
