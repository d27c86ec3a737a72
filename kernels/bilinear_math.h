// Bilinear resizing's formulas (kernels/bilinear.h), one for the CPU loops
// (kernels/cpu/bilinear.cpp) and the CUDA kernels (kernels/cuda/bilinear.cu).
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace tandem::kernels::bilinear_math {

// The two source samples of output index `dst` along an axis, and their weights.
template <typename T>
struct Tap {
  int64_t i0 = 0, i1 = 0;
  T l0 = T(1), l1 = T(0);
};

// PyTorch's area_pixel_compute_source_index with align_corners=False, in T.
template <typename T>
TANDEM_HOST_DEVICE inline Tap<T> tap(int64_t dst, int64_t in_size, int64_t out_size) {
  const T scale = static_cast<T>(in_size) / static_cast<T>(out_size);
  T src = scale * (static_cast<T>(dst) + T(0.5)) - T(0.5);
  if (src < T(0)) src = T(0);
  Tap<T> t;
  t.i0 = static_cast<int64_t>(src);
  if (t.i0 > in_size - 1) t.i0 = in_size - 1;
  t.i1 = t.i0 < in_size - 1 ? t.i0 + 1 : t.i0;
  T l1 = src - static_cast<T>(t.i0);
  l1 = l1 < T(0) ? T(0) : l1 > T(1) ? T(1) : l1;
  t.l1 = l1;
  t.l0 = T(1) - l1;
  return t;
}

// Output (oy, ox) of one plane [in_h, in_w].
template <typename T>
TANDEM_HOST_DEVICE inline T resize_at(const T* plane, int64_t in_h, int64_t in_w, int64_t out_h,
                                      int64_t out_w, int64_t oy, int64_t ox) {
  const Tap<T> h = tap<T>(oy, in_h, out_h), w = tap<T>(ox, in_w, out_w);
  const T* r0 = plane + h.i0 * in_w;
  const T* r1 = plane + h.i1 * in_w;
  return h.l0 * (w.l0 * r0[w.i0] + w.l1 * r0[w.i1]) + h.l1 * (w.l0 * r1[w.i0] + w.l1 * r1[w.i1]);
}

// The weight with which output `dst` reads input `i` along an axis (0 when it does not).
template <typename T>
TANDEM_HOST_DEVICE inline T weight(const Tap<T>& t, int64_t i) {
  return (t.i0 == i ? t.l0 : T(0)) + (t.i1 == i ? t.l1 : T(0));
}

// The first output whose i0 is >= i - 1: every output reading input i lies from here until
// i0 passes i (i0 never decreases along the axis). Found from an estimate, then walked to
// exactly, so rounding in the estimate costs steps, never correctness.
template <typename T>
TANDEM_HOST_DEVICE inline int64_t first_reader(int64_t i, int64_t in_size, int64_t out_size) {
  int64_t d = (i - 1) * out_size / in_size - 1;
  d = d < 0 ? 0 : d > out_size - 1 ? out_size - 1 : d;
  while (d > 0 && tap<T>(d - 1, in_size, out_size).i0 >= i - 1) --d;
  while (d < out_size && tap<T>(d, in_size, out_size).i0 < i - 1) ++d;
  return d;
}

// Input (iy, ix) of the adjoint: the outputs of grad [out_h, out_w] that read it, rows
// then columns in increasing order, each times its two weights.
template <typename T>
TANDEM_HOST_DEVICE inline T adjoint_at(const T* grad, int64_t in_h, int64_t in_w, int64_t out_h,
                                       int64_t out_w, int64_t iy, int64_t ix) {
  const int64_t x_first = first_reader<T>(ix, in_w, out_w);
  T acc = T(0);
  for (int64_t oy = first_reader<T>(iy, in_h, out_h); oy < out_h; ++oy) {
    const Tap<T> h = tap<T>(oy, in_h, out_h);
    if (h.i0 > iy) break;
    T row = T(0);
    for (int64_t ox = x_first; ox < out_w; ++ox) {
      const Tap<T> w = tap<T>(ox, in_w, out_w);
      if (w.i0 > ix) break;
      row += weight(w, ix) * grad[oy * out_w + ox];
    }
    acc += weight(h, iy) * row;
  }
  return acc;
}

}  // namespace tandem::kernels::bilinear_math
