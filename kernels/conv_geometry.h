// Internal to the conv kernels (kernels/cpu/conv.cpp and kernels/cuda/conv.cu): the
// geometry of a convolution and the operand checks both devices share, so the CPU and
// CUDA paths reject the same inputs with the same messages.
//
// conv_transpose2d is conv2d's adjoint: transpose_geometry describes the conv2d that maps
// the transposed conv's output [n, o, ho, wo] back to its input [n, c, h, w].
#pragma once

#include <algorithm>

#include "kernels/conv.h"

namespace tandem::kernels::conv_detail {

// The geometry of one conv2d: input [n, c, h, w] -> output [n, o, ho, wo].
struct Geometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t ho, wo;
  int64_t stride, padding;

  int64_t k() const { return c * kh * kw; }
  int64_t l() const { return ho * wo; }
  // Samples per GEMM: as many as fit in a column buffer of `max_elements`, at least one.
  int64_t chunk(int64_t max_elements) const {
    return std::clamp<int64_t>(max_elements / std::max<int64_t>(1, k() * l()), 1, std::max<int64_t>(1, n));
  }
};

// Defined, 4-D, same dtype and device (the device itself is the caller's business).
inline void check_operands(const char* op, const Tensor& a, const char* a_what, const Tensor& b,
                           const char* b_what) {
  check_defined(op, a, a_what);
  check_defined(op, b, b_what);
  TANDEM_CHECK(a.dim() == 4 && b.dim() == 4, op << ": needs 4-D " << a_what << " and " << b_what << ", got "
                                                << shape_str(a.shape()) << " and " << shape_str(b.shape()));
  check_same_dtype(op, a, b);
  check_same_device(op, a, b);
}

inline void check_params(const char* op, const Conv2dParams& p, bool transposed) {
  TANDEM_CHECK(p.dilation == 1 && p.groups == 1,
               op << ": dilation " << p.dilation << " and groups " << p.groups << " are not supported yet");
  TANDEM_CHECK(p.stride >= 1 && p.padding >= 0,
               op << ": stride " << p.stride << " and padding " << p.padding << " must be >= 1 and >= 0");
  if (transposed) {
    TANDEM_CHECK(
        p.output_padding >= 0 && p.output_padding < p.stride,
        op << ": output_padding " << p.output_padding << " must be in [0, stride " << p.stride << ")");
  } else {
    TANDEM_CHECK(p.output_padding == 0,
                 op << ": output_padding " << p.output_padding << " applies to conv_transpose2d only");
  }
}

// conv2d geometry for input shape x and weight shape [o, c, kh, kw].
inline Geometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TANDEM_CHECK(x.size() == 4 && w.size() == 4,
               op << ": needs 4-D input and weight, got " << shape_str(x) << " and " << shape_str(w));
  TANDEM_CHECK(x[1] == w[1], op << ": input " << shape_str(x) << " has " << x[1] << " channels but weight "
                                << shape_str(w) << " expects " << w[1]);
  Geometry g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], 0, 0, p.stride, p.padding};
  TANDEM_CHECK(g.h + 2 * g.padding >= g.kh && g.w + 2 * g.padding >= g.kw && g.kh > 0 && g.kw > 0,
               op << ": kernel of weight " << shape_str(w) << " does not fit input " << shape_str(x)
                  << " with padding " << g.padding);
  g.ho = (g.h + 2 * g.padding - g.kh) / g.stride + 1;
  g.wo = (g.w + 2 * g.padding - g.kw) / g.stride + 1;
  return g;
}

// The conv2d whose adjoint is conv_transpose2d(x [n, c, h, w], weight [c, o, kh, kw]).
inline Geometry transpose_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TANDEM_CHECK(x.size() == 4 && w.size() == 4,
               op << ": needs 4-D input and weight, got " << shape_str(x) << " and " << shape_str(w));
  TANDEM_CHECK(x[1] == w[0], op << ": input " << shape_str(x) << " has " << x[1] << " channels but weight "
                                << shape_str(w) << " expects " << w[0]);
  TANDEM_CHECK(w[2] > 0 && w[3] > 0, op << ": empty kernel in weight " << shape_str(w));
  int64_t ho = (x[2] - 1) * p.stride - 2 * p.padding + w[2] + p.output_padding;
  int64_t wo = (x[3] - 1) * p.stride - 2 * p.padding + w[3] + p.output_padding;
  TANDEM_CHECK(ho > 0 && wo > 0, op << ": input " << shape_str(x) << " with weight " << shape_str(w)
                                    << " and padding " << p.padding << " gives an empty output [" << ho
                                    << ", " << wo << "]");
  return Geometry{x[0], w[1], ho, wo, w[0], w[2], w[3], x[2], x[3], p.stride, p.padding};
}

inline void check_grad_shape(const char* op, const Tensor& grad, const Shape& expected) {
  check_defined(op, grad, "gradient");
  TANDEM_CHECK(grad.shape() == expected,
               op << ": gradient " << shape_str(grad.shape()) << " should be " << shape_str(expected));
}

}  // namespace tandem::kernels::conv_detail
