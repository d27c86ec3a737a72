// Convolution by im2col + GEMM. Three kernels do the work (forward, input gradient, weight
// gradient of conv2d); conv_transpose2d is conv2d's adjoint, so its entry points call the
// same three with the roles of input and output swapped.
//
// Several samples share one im2col buffer of shape [K, nb * L] (K = C kh kw, L = Ho Wo)
// so each GEMM is wide enough to run near peak even on 7x7 feature maps; the [O, nb * L]
// result is then scattered back to NCHW. A grouped convolution runs one such GEMM per
// group (K = C / groups kh kw), on that group's channels and weight rows. float32 runs
// through oneDNN instead where the build has it (kernels/cpu/conv_onednn.h;
// TANDEM_CONV_BACKEND=eigen keeps it here, as the reference the tests hold oneDNN to). CUDA
// tensors go to kernels/cuda/conv.cu (cuDNN, or the same plan with device kernels). Each
// entry point is what the kernel
// recorder (kernel_recorder.h) sees.
#include "kernels/conv.h"

#include <algorithm>
#include <sstream>

#include "kernels/conv_geometry.h"
#include "kernels/cpu/conv_onednn.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/kernel_recorder.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/conv_cuda.h"
#endif

namespace tandem::kernels {

namespace {

using conv_detail::check_grad_shape;
using conv_detail::check_params;
using conv_detail::conv_geometry;
using conv_detail::Geometry;
using conv_detail::transpose_geometry;

// Defined, 4-D, same dtype and device, on a device with kernels in this build.
void check_operands(const char* op, const Tensor& a, const char* a_what, const Tensor& b,
                    const char* b_what) {
  conv_detail::check_operands(op, a, a_what, b, b_what);
  require_kernel_device(op, a);
}

// Bounds the shared im2col buffer (elements) so large batches do not allocate without limit.
constexpr int64_t kMaxColumnElements = int64_t{1} << 22;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The output positions [lo, hi) whose input coordinate o * stride + offset lies in [0, in_size).
void valid_range(int64_t out_size, int64_t in_size, int64_t stride, int64_t offset, int64_t& lo,
                 int64_t& hi) {
  lo = offset >= 0 ? 0 : ceil_div(-offset, stride);
  hi = in_size - offset <= 0 ? 0 : std::min(out_size, ceil_div(in_size - offset, stride));
  lo = std::min(lo, hi);
}

// Writes the patches of one group of one sample, x [cg, h, w] (the group's first channel),
// into columns [0, l) of col, whose rows are (channel, ki, kj) and are `ld` elements apart.
template <typename T>
void im2col(const T* x, const Geometry& g, T* col, int64_t ld) {
  for (int64_t ch = 0; ch < g.cg(); ++ch)
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      int64_t oh_lo, oh_hi;
      valid_range(g.ho, g.h, g.stride, ki * g.dilation - g.padding, oh_lo, oh_hi);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((ch * g.kh + ki) * g.kw + kj) * ld;
        int64_t ow_lo, ow_hi;
        valid_range(g.wo, g.w, g.stride, kj * g.dilation - g.padding, ow_lo, ow_hi);
        std::fill(row, row + oh_lo * g.wo, T(0));
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          const T* src = x + (ch * g.h + oh * g.stride + ki * g.dilation - g.padding) * g.w +
                         kj * g.dilation - g.padding;
          T* dst = row + oh * g.wo;
          for (int64_t ow = 0; ow < ow_lo; ++ow) dst[ow] = T(0);
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] = src[ow * g.stride];
          for (int64_t ow = ow_hi; ow < g.wo; ++ow) dst[ow] = T(0);
        }
        std::fill(row + oh_hi * g.wo, row + g.l(), T(0));
      }
    }
}

// The adjoint of im2col: adds each column entry back into one group of a sample, dx [cg, h, w].
template <typename T>
void col2im(const T* col, int64_t ld, const Geometry& g, T* dx) {
  for (int64_t ch = 0; ch < g.cg(); ++ch)
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      int64_t oh_lo, oh_hi;
      valid_range(g.ho, g.h, g.stride, ki * g.dilation - g.padding, oh_lo, oh_hi);
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((ch * g.kh + ki) * g.kw + kj) * ld;
        int64_t ow_lo, ow_hi;
        valid_range(g.wo, g.w, g.stride, kj * g.dilation - g.padding, ow_lo, ow_hi);
        for (int64_t oh = oh_lo; oh < oh_hi; ++oh) {
          T* dst = dx + (ch * g.h + oh * g.stride + ki * g.dilation - g.padding) * g.w + kj * g.dilation -
                   g.padding;
          const T* src = row + oh * g.wo;
          for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow * g.stride] += src[ow];
        }
      }
    }
}

// y [n0 + i, :, :] <- buf [:, i * l : (i + 1) * l] for i < count, and the reverse.
template <typename T>
void scatter_rows(const T* buf, int64_t rows, int64_t count, int64_t l, T* y) {
  for (int64_t i = 0; i < count; ++i)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(buf + r * count * l + i * l, l, y + (i * rows + r) * l);
}

template <typename T>
void gather_rows(const T* y, int64_t rows, int64_t count, int64_t l, T* buf) {
  for (int64_t i = 0; i < count; ++i)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(y + (i * rows + r) * l, l, buf + r * count * l + i * l);
}

// y [n, o, ho, wo] = conv(x [n, c, h, w], weight [o, c / groups, kh, kw]).
template <typename T>
void forward_impl(const Tensor& x, const Tensor& weight, Tensor& y, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor w2 = weight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, x.dtype(), x.device());
  Tensor out = nb > 1 ? Tensor::empty({g.o, nb * l}, x.dtype(), x.device()) : Tensor();
  const T* px = x.data<T>();
  T* py = y.data<T>();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t i = 0; i < count; ++i)
        im2col(px + ((n0 + i) * g.c + grp * g.cg()) * g.h * g.w, g, cols.data<T>() + i * l, count * l);
      Tensor wg = w2.view_range(grp * og * k, {og, k});
      Tensor dst = count == 1 ? y.view_range((n0 * g.o + grp * og) * l, {og, l})
                              : out.view_range(grp * og * count * l, {og, count * l});
      gemm(wg, false, cols, false, dst);
    }
    if (count > 1) scatter_rows(out.data<T>(), g.o, count, l, py + n0 * g.o * l);
  }
}

// dx [n, c, h, w] = conv^T(grad [n, o, ho, wo], weight [o, c / groups, kh, kw]).
template <typename T>
void backward_input_impl(const Tensor& grad, const Tensor& weight, Tensor& dx, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor w2 = weight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, grad.dtype(), grad.device());
  Tensor gbuf = nb > 1 ? Tensor::empty({g.o, nb * l}, grad.dtype(), grad.device()) : Tensor();
  dx.zero_();
  T* pdx = dx.data<T>();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor gs;
    if (count == 1) {
      gs = grad.view_range(n0 * g.o * l, {g.o, l});
    } else {
      gs = gbuf.view_range(0, {g.o, count * l});
      gather_rows(grad.data<T>() + n0 * g.o * l, g.o, count, l, gs.data<T>());
    }
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      Tensor wg = w2.view_range(grp * og * k, {og, k});
      Tensor gsg = gs.view_range(grp * og * count * l, {og, count * l});
      gemm(wg, true, gsg, false, cols);
      for (int64_t i = 0; i < count; ++i)
        col2im(cols.data<T>() + i * l, count * l, g, pdx + ((n0 + i) * g.c + grp * g.cg()) * g.h * g.w);
    }
  }
}

// dweight [o, c / groups, kh, kw] = sum over samples of grad [o, l] x im2col(x)^T, group by group.
template <typename T>
void backward_weight_impl(const Tensor& grad, const Tensor& x, Tensor& dweight, const Geometry& g) {
  const int64_t k = g.k(), l = g.l(), nb = g.chunk(kMaxColumnElements), og = g.og();
  Tensor dw2 = dweight.view({g.o, k});
  Tensor col = Tensor::empty({k, nb * l}, x.dtype(), x.device());
  Tensor gbuf = nb > 1 ? Tensor::empty({g.o, nb * l}, x.dtype(), x.device()) : Tensor();
  const T* px = x.data<T>();
  for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
    const int64_t count = std::min(nb, g.n - n0);
    Tensor gs;
    if (count == 1) {
      gs = grad.view_range(n0 * g.o * l, {g.o, l});
    } else {
      gs = gbuf.view_range(0, {g.o, count * l});
      gather_rows(grad.data<T>() + n0 * g.o * l, g.o, count, l, gs.data<T>());
    }
    Tensor cols = col.view_range(0, {k, count * l});
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t i = 0; i < count; ++i)
        im2col(px + ((n0 + i) * g.c + grp * g.cg()) * g.h * g.w, g, cols.data<T>() + i * l, count * l);
      Tensor gsg = gs.view_range(grp * og * count * l, {og, count * l});
      Tensor dwg = dw2.view_range(grp * og * k, {og, k});
      gemm(gsg, false, cols, true, dwg, 1.0, n0 == 0 ? 0.0 : 1.0);
    }
  }
  if (g.n == 0) dweight.zero_();
}

}  // namespace

// The entry points check their operands and work out the geometry once, for either
// device; only the three kernels below differ between the CPU and kernels/cuda.
namespace {

// Reduced precision (conv.h): on a GPU, cuBLAS's 16-bit GEMMs (cuda/conv_cuda.h); on the
// CPU, oneDNN's bfloat16 where it runs natively, else the float32 kernels on the widened
// operands.
bool is_reduced(const Tensor& t) { return is_16bit_float(t.dtype()); }

void run_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y, const Geometry& g) {
#if TANDEM_HAVE_CUDA
  if (x.device().is_cuda()) return cuda::conv_forward(op, x, weight, y, g);
#endif
  if (cpu::onednn_conv_forward(op, x, weight, y, g)) return;  // cpu/conv_onednn.h
  if (is_reduced(x)) return run_forward(op, x.to(DType::f32), weight.to(DType::f32), y, g);
  dispatch_float(op, x.dtype(), [&]<typename T>() { forward_impl<T>(x, weight, y, g); });
}

void run_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                        const Geometry& g) {
#if TANDEM_HAVE_CUDA
  if (grad.device().is_cuda()) return cuda::conv_backward_input(op, grad, weight, dx, g);
#endif
  if (cpu::onednn_conv_backward_input(op, grad, weight, dx, g)) return;  // cpu/conv_onednn.h
  if (is_reduced(grad)) return run_backward_input(op, grad.to(DType::f32), weight.to(DType::f32), dx, g);
  dispatch_float(op, grad.dtype(), [&]<typename T>() { backward_input_impl<T>(grad, weight, dx, g); });
}

void run_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                         const Geometry& g) {
#if TANDEM_HAVE_CUDA
  if (x.device().is_cuda()) return cuda::conv_backward_weight(op, grad, x, dweight, g);
#endif
  if (cpu::onednn_conv_backward_weight(op, grad, x, dweight, g)) return;  // cpu/conv_onednn.h
  if (is_reduced(x)) return run_backward_weight(op, grad.to(DType::f32), x.to(DType::f32), dweight, g);
  dispatch_float(op, x.dtype(), [&]<typename T>() { backward_weight_impl<T>(grad, x, dweight, g); });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dParams& p) {
  const char* op = "conv2d";
  check_operands(op, x, "input", weight, "weight");
  check_params(op, p, false);
  Geometry g = conv_geometry(op, x.shape(), weight.shape(), p);
  Tensor y = Tensor::empty({g.n, g.o, g.ho, g.wo}, accumulate_dtype(x.dtype()), x.device());
  ConvRecordScope record(ConvOp::conv2d, x.shape(), weight.shape(), y.shape(), p, x.dtype());
  run_forward(op, x, weight, y, g);
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& x_shape,
                             const Conv2dParams& p) {
  const char* op = "conv2d_backward_input";
  check_operands(op, grad, "gradient", weight, "weight");
  check_params(op, p, false);
  Geometry g = conv_geometry(op, x_shape, weight.shape(), p);
  check_grad_shape(op, grad, {g.n, g.o, g.ho, g.wo});
  Tensor dx = Tensor::empty(x_shape, accumulate_dtype(grad.dtype()), grad.device());
  ConvRecordScope record(ConvOp::conv2d_backward_input, grad.shape(), weight.shape(), x_shape, p,
                         grad.dtype());
  run_backward_input(op, grad, weight, dx, g);
  return dx;
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                              const Conv2dParams& p) {
  const char* op = "conv2d_backward_weight";
  check_operands(op, grad, "gradient", x, "input");
  check_params(op, p, false);
  Geometry g = conv_geometry(op, x.shape(), weight_shape, p);
  check_grad_shape(op, grad, {g.n, g.o, g.ho, g.wo});
  Tensor dw = Tensor::empty(weight_shape, accumulate_dtype(x.dtype()), x.device());
  ConvRecordScope record(ConvOp::conv2d_backward_weight, grad.shape(), x.shape(), weight_shape, p, x.dtype());
  run_backward_weight(op, grad, x, dw, g);
  return dw;
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Conv2dParams& p) {
  const char* op = "conv_transpose2d";
  check_operands(op, x, "input", weight, "weight");
  check_params(op, p, true);
  Geometry g = transpose_geometry(op, x.shape(), weight.shape(), p);
  Tensor y = Tensor::empty({g.n, g.c, g.h, g.w}, accumulate_dtype(x.dtype()), x.device());
  ConvRecordScope record(ConvOp::conv_transpose2d, x.shape(), weight.shape(), y.shape(), p, x.dtype());
  run_backward_input(op, x, weight, y, g);
  return y;
}

Tensor conv_transpose2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& x_shape,
                                       const Conv2dParams& p) {
  const char* op = "conv_transpose2d_backward_input";
  check_operands(op, grad, "gradient", weight, "weight");
  check_params(op, p, true);
  Geometry g = transpose_geometry(op, x_shape, weight.shape(), p);
  check_grad_shape(op, grad, {g.n, g.c, g.h, g.w});
  Tensor dx = Tensor::empty(x_shape, accumulate_dtype(grad.dtype()), grad.device());
  ConvRecordScope record(ConvOp::conv_transpose2d_backward_input, grad.shape(), weight.shape(), x_shape, p,
                         grad.dtype());
  run_forward(op, grad, weight, dx, g);
  return dx;
}

Tensor conv_transpose2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape,
                                        const Conv2dParams& p) {
  const char* op = "conv_transpose2d_backward_weight";
  check_operands(op, grad, "gradient", x, "input");
  check_params(op, p, true);
  Geometry g = transpose_geometry(op, x.shape(), weight_shape, p);
  check_grad_shape(op, grad, {g.n, g.c, g.h, g.w});
  Tensor dw = Tensor::empty(weight_shape, accumulate_dtype(x.dtype()), x.device());
  ConvRecordScope record(ConvOp::conv_transpose2d_backward_weight, grad.shape(), x.shape(), weight_shape, p,
                         x.dtype());
  run_backward_weight(op, x, grad, dw, g);
  return dw;
}

}  // namespace tandem::kernels
