// Internal to the permute kernels (kernels/cpu/shape_ops.cpp and kernels/cuda/shape_ops.cu):
// the checks both devices make, and the index map both loops run, so the twins reject the
// same inputs with the same messages and move every element to the same place.
//
// Output element (i_0, ..., i_{d-1}) of permute(x, dims) is input element
// (j with j[dims[k]] = i_k): output axis k is input axis dims[k].
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/host_device.h"
#include "runtime/tensor.h"

namespace tandem::kernels::permute_detail {

inline constexpr int kMaxDims = 8;

// The output's sizes and, for each output axis, the input stride of the axis it reads:
// a fixed-size struct so a CUDA kernel takes it by value.
struct PermuteLayout {
  int dims = 0;
  int64_t out_sizes[kMaxDims] = {};
  int64_t in_strides[kMaxDims] = {};
};

// The input offset of output element `out_index` (row-major over out_sizes).
TANDEM_HOST_DEVICE inline int64_t permute_source(const PermuteLayout& l, int64_t out_index) {
  int64_t src = 0;
  for (int k = l.dims - 1; k >= 0; --k) {
    const int64_t size = l.out_sizes[k];
    src += (out_index % size) * l.in_strides[k];
    out_index /= size;
  }
  return src;
}

inline std::string dims_str(const std::vector<int64_t>& dims) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << ")";
  return os.str();
}

// Checks that dims is a permutation of x's axes (negative counts from the end) and returns
// the layout; an Error names the op, the dims and the shape.
inline PermuteLayout permute_layout(const char* op, const Shape& shape, const std::vector<int64_t>& dims) {
  const int64_t d = static_cast<int64_t>(shape.size());
  TANDEM_CHECK(static_cast<int64_t>(dims.size()) == d, op << ": dims " << dims_str(dims) << " name "
                                                          << dims.size() << " axes for shape "
                                                          << shape_str(shape) << " of " << d);
  TANDEM_CHECK(d <= kMaxDims,
               op << ": shape " << shape_str(shape) << " has more than " << kMaxDims << " axes");
  PermuteLayout l;
  l.dims = static_cast<int>(d);
  int64_t stride[kMaxDims];
  for (int64_t k = d - 1, s = 1; k >= 0; --k) {
    stride[k] = s;
    s *= shape[static_cast<size_t>(k)];
  }
  bool seen[kMaxDims] = {};
  for (int64_t k = 0; k < d; ++k) {
    const int64_t a =
        dims[static_cast<size_t>(k)] < 0 ? dims[static_cast<size_t>(k)] + d : dims[static_cast<size_t>(k)];
    TANDEM_CHECK(a >= 0 && a < d, op << ": dim " << dims[static_cast<size_t>(k)] << " of dims "
                                     << dims_str(dims) << " is out of range for shape " << shape_str(shape));
    TANDEM_CHECK(!seen[a], op << ": dims " << dims_str(dims) << " repeat axis " << a << " (shape "
                              << shape_str(shape) << ")");
    seen[a] = true;
    l.out_sizes[k] = shape[static_cast<size_t>(a)];
    l.in_strides[k] = stride[a];
  }
  return l;
}

inline Shape permuted_shape(const PermuteLayout& l) { return Shape(l.out_sizes, l.out_sizes + l.dims); }

}  // namespace tandem::kernels::permute_detail
