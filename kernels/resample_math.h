// upfirdn2d's per-output formula (kernels/resample.h), one for the CPU loop
// (kernels/cpu/resample.cpp) and the CUDA kernel (kernels/cuda/resample.cu), so the twins
// sum the same terms in the same order.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/resample.h"

namespace tandem::kernels::resample_math {

// Everything one output needs besides the data; plain values, passed to a kernel by copy.
struct UpFirDn2dGeometry {
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t fh = 0, fw = 0;
  bool separable = false;  // a 1-D filter of fh == fw taps, weight (i, j) = f[i] f[j]
  UpFirDn2dParams p;
};

// Output (oy, ox) of one plane [in_h, in_w]: the filter window at (oy down_y, ox down_x) of
// the padded, upsampled plane, visiting only the taps that land on input samples. A 2-D
// filter sums x * w over the window, rows outer; a separable one sums, over the rows, f[i]
// times the row's own sum of x * f[j] (a horizontal pass, then a vertical one: the order
// the CPU's vectorised passes take).
template <typename T>
TANDEM_HOST_DEVICE inline T upfirdn2d_at(const T* plane, const T* f, const UpFirDn2dGeometry& g, int64_t oy,
                                         int64_t ox) {
  const UpFirDn2dParams& p = g.p;
  T acc = T(0);
  for (int64_t i = 0; i < g.fh; ++i) {
    const int64_t v = oy * p.down_y + i - p.pad_y0;  // row in the upsampled plane
    if (v < 0 || v >= g.in_h * p.up_y || v % p.up_y != 0) continue;
    const T* row = plane + (v / p.up_y) * g.in_w;
    const int64_t fi = p.flip_filter ? i : g.fh - 1 - i;
    T row_sum = T(0);
    for (int64_t j = 0; j < g.fw; ++j) {
      const int64_t u = ox * p.down_x + j - p.pad_x0;
      if (u < 0 || u >= g.in_w * p.up_x || u % p.up_x != 0) continue;
      const int64_t fj = p.flip_filter ? j : g.fw - 1 - j;
      if (g.separable)
        row_sum += row[u / p.up_x] * f[fj];
      else
        acc += row[u / p.up_x] * f[fi * g.fw + fj];
    }
    if (g.separable) acc += row_sum * f[fi];
  }
  return acc;
}

}  // namespace tandem::kernels::resample_math

namespace tandem::kernels::resample_math {

// The checked geometry of upfirdn2d(x, filter, p) (kernels/cpu/resample.cpp), for both
// devices: errors name `op`.
UpFirDn2dGeometry upfirdn2d_geometry(const char* op, const Tensor& x, const Tensor& filter,
                                     const UpFirDn2dParams& p);

}  // namespace tandem::kernels::resample_math
