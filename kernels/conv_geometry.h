// Internal to the conv kernels (kernels/cpu/conv.cpp and kernels/cuda/conv.cu): the
// geometry of a convolution and the operand checks both devices share, so the CPU and
// CUDA paths reject the same inputs with the same messages.
//
// conv_transpose2d is conv2d's adjoint: transpose_geometry describes the conv2d that maps
// the transposed conv's output [n, o, ho, wo] back to its input [n, c, h, w].
//
// Grouped convolutions (PyTorch's semantics): the c input and o output channels split into
// `groups` consecutive blocks, and output block j sees input block j only, through weight
// rows [j og, (j + 1) og) of the weight [o, c / groups, kh, kw] (for conv_transpose2d the
// weight [c, o / groups, kh, kw] is that same array for its adjoint conv2d). Taps are
// `dilation` apart, so a kernel spans dilation (k - 1) + 1 input positions.
#pragma once

#include <algorithm>

#include "kernels/conv.h"

namespace tandem::kernels::conv_detail {

// The geometry of one conv2d: input [n, c, h, w] -> output [n, o, ho, wo].
struct Geometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t ho, wo;
  int64_t stride, padding, dilation, groups;

  int64_t cg() const { return c / groups; }  // input channels per group
  int64_t og() const { return o / groups; }  // output channels per group
  // One group's GEMM depth (its rows of the weight [o, cg kh kw]) and width per sample.
  int64_t k() const { return cg() * kh * kw; }
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

// The span of a kernel of `k` taps `dilation` apart.
inline int64_t effective_kernel(int64_t k, int64_t dilation) { return dilation * (k - 1) + 1; }

inline void check_params(const char* op, const Conv2dParams& p, bool transposed) {
  TANDEM_CHECK(p.stride >= 1 && p.padding >= 0,
               op << ": stride " << p.stride << " and padding " << p.padding << " must be >= 1 and >= 0");
  TANDEM_CHECK(p.dilation >= 1 && p.groups >= 1,
               op << ": dilation " << p.dilation << " and groups " << p.groups << " must be >= 1");
  if (transposed) {
    // PyTorch's rule: the extra rows must lie within one stride or one dilation step.
    TANDEM_CHECK(p.output_padding >= 0 && p.output_padding < std::max(p.stride, p.dilation),
                 op << ": output_padding " << p.output_padding << " must be in [0, max(stride " << p.stride
                    << ", dilation " << p.dilation << "))");
  } else {
    TANDEM_CHECK(p.output_padding == 0,
                 op << ": output_padding " << p.output_padding << " applies to conv_transpose2d only");
  }
}

// conv2d geometry for input shape x and weight shape [o, c / groups, kh, kw].
inline Geometry conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TANDEM_CHECK(x.size() == 4 && w.size() == 4,
               op << ": needs 4-D input and weight, got " << shape_str(x) << " and " << shape_str(w));
  TANDEM_CHECK(w[0] % p.groups == 0, op << ": weight " << shape_str(w) << " has " << w[0]
                                        << " output channels, not divisible by groups " << p.groups);
  TANDEM_CHECK(x[1] == w[1] * p.groups, op << ": input " << shape_str(x) << " has " << x[1]
                                           << " channels but weight " << shape_str(w) << " with groups "
                                           << p.groups << " expects " << w[1] * p.groups);
  Geometry g{.n = x[0],
             .c = x[1],
             .h = x[2],
             .w = x[3],
             .o = w[0],
             .kh = w[2],
             .kw = w[3],
             .ho = 0,
             .wo = 0,
             .stride = p.stride,
             .padding = p.padding,
             .dilation = p.dilation,
             .groups = p.groups};
  const int64_t ekh = effective_kernel(g.kh, g.dilation), ekw = effective_kernel(g.kw, g.dilation);
  TANDEM_CHECK(g.h + 2 * g.padding >= ekh && g.w + 2 * g.padding >= ekw && g.kh > 0 && g.kw > 0,
               op << ": kernel of weight " << shape_str(w) << " with dilation " << g.dilation
                  << " does not fit input " << shape_str(x) << " with padding " << g.padding);
  g.ho = (g.h + 2 * g.padding - ekh) / g.stride + 1;
  g.wo = (g.w + 2 * g.padding - ekw) / g.stride + 1;
  return g;
}

// The conv2d whose adjoint is conv_transpose2d(x [n, c, h, w], weight [c, o / groups, kh, kw]).
inline Geometry transpose_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dParams& p) {
  TANDEM_CHECK(x.size() == 4 && w.size() == 4,
               op << ": needs 4-D input and weight, got " << shape_str(x) << " and " << shape_str(w));
  TANDEM_CHECK(x[1] == w[0], op << ": input " << shape_str(x) << " has " << x[1] << " channels but weight "
                                << shape_str(w) << " expects " << w[0]);
  TANDEM_CHECK(x[1] % p.groups == 0, op << ": input " << shape_str(x) << " has " << x[1]
                                        << " channels, not divisible by groups " << p.groups);
  TANDEM_CHECK(w[2] > 0 && w[3] > 0, op << ": empty kernel in weight " << shape_str(w));
  int64_t ho = (x[2] - 1) * p.stride - 2 * p.padding + effective_kernel(w[2], p.dilation) + p.output_padding;
  int64_t wo = (x[3] - 1) * p.stride - 2 * p.padding + effective_kernel(w[3], p.dilation) + p.output_padding;
  TANDEM_CHECK(ho > 0 && wo > 0, op << ": input " << shape_str(x) << " with weight " << shape_str(w)
                                    << " and padding " << p.padding << " gives an empty output [" << ho
                                    << ", " << wo << "]");
  return Geometry{.n = x[0],
                  .c = w[1] * p.groups,
                  .h = ho,
                  .w = wo,
                  .o = w[0],
                  .kh = w[2],
                  .kw = w[3],
                  .ho = x[2],
                  .wo = x[3],
                  .stride = p.stride,
                  .padding = p.padding,
                  .dilation = p.dilation,
                  .groups = p.groups};
}

inline void check_grad_shape(const char* op, const Tensor& grad, const Shape& expected) {
  check_defined(op, grad, "gradient");
  TANDEM_CHECK(grad.shape() == expected,
               op << ": gradient " << shape_str(grad.shape()) << " should be " << shape_str(expected));
}

}  // namespace tandem::kernels::conv_detail
