// Internal to the reduce and shape kernels (kernels/cpu and kernels/cuda): axis handling and
// the concat checks both devices share, so the CPU and CUDA paths reject the same inputs
// with the same messages. The device itself is the caller's business.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::kernels::axis_detail {

// `axis` (negative counts from the end) as an index into `shape`; an Error names the op.
inline int64_t normalize_axis(const char* op, const Shape& shape, int64_t axis) {
  const int64_t d = static_cast<int64_t>(shape.size());
  const int64_t a = axis < 0 ? axis + d : axis;
  TANDEM_CHECK(a >= 0 && a < d, op << ": axis " << axis << " out of range for shape " << shape_str(shape));
  return a;
}

// Splits shape around `axis` into (outer, size, inner) so element (o, k, i) is at
// (o * size + k) * inner + i.
inline void split_at(const Shape& shape, int64_t axis, int64_t& outer, int64_t& size, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= shape[static_cast<size_t>(i)];
  size = shape[static_cast<size_t>(axis)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) inner *= shape[i];
}

inline std::string shapes_str(const std::vector<Tensor>& parts) {
  std::ostringstream os;
  for (size_t i = 0; i < parts.size(); ++i) os << (i ? ", " : "") << shape_str(parts[i].shape());
  return os.str();
}

// concat's checks (at least one part, all defined, equal shapes outside the axis, one dtype
// and device). Returns the output shape; `a` receives the normalised axis.
inline Shape concat_shape(const char* op, const std::vector<Tensor>& parts, int64_t axis, int64_t& a) {
  TANDEM_CHECK(!parts.empty(), op << ": no tensors given");
  for (const Tensor& p : parts) check_defined(op, p, "part");
  const Tensor& first = parts.front();
  a = normalize_axis(op, first.shape(), axis);
  Shape out_shape = first.shape();
  out_shape[static_cast<size_t>(a)] = 0;
  for (const Tensor& p : parts) {
    bool match = p.dim() == first.dim();
    for (int64_t i = 0; match && i < p.dim(); ++i) match = i == a || p.size(i) == first.size(i);
    TANDEM_CHECK(match, op << ": shapes differ outside axis " << axis << ": " << shape_str(first.shape())
                           << " vs " << shape_str(p.shape()) << " (all parts: " << shapes_str(parts) << ")");
    check_same_dtype(op, first, p);
    check_same_device(op, first, p);
    out_shape[static_cast<size_t>(a)] += p.size(a);
  }
  return out_shape;
}

}  // namespace tandem::kernels::axis_detail
