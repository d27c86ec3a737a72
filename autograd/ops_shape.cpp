#include <utility>

#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/shape_ops.h"

namespace tandem {

Variable reshape(const Variable& x, const Shape& shape) {
  TANDEM_CHECK(shape_numel(shape) == x.numel(),
               "reshape: cannot reshape " << shape_str(x.shape()) << " to " << shape_str(shape) << " ("
                                          << x.numel() << " vs " << shape_numel(shape) << " elements)");
  return make_result(
      x.data().view(shape), "reshape", {x},
      [in = x.shape()](const Tensor& g, const FunctionNode&) { return std::vector<Tensor>{g.view(in)}; },
      [in = x.shape()](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{reshape(g, in)};
      });
}

Variable flatten(const Variable& x) {
  TANDEM_CHECK(x.dim() >= 1, "flatten: needs [N, ...], got " << shape_str(x.shape()));
  int64_t n = x.size(0);
  int64_t rest = 1;
  for (int64_t i = 1; i < x.dim(); ++i) rest *= x.size(i);
  return reshape(x, {n, rest});
}

Variable concat(const std::vector<Variable>& parts, int64_t axis) {
  std::vector<Tensor> data;
  data.reserve(parts.size());
  for (const Variable& p : parts) {
    TANDEM_CHECK(p.defined(), "concat: undefined part");
    data.push_back(p.data());
  }
  Tensor out = kernels::concat(data, axis);
  int64_t a = axis < 0 ? axis + out.dim() : axis;
  std::vector<int64_t> sizes;
  sizes.reserve(parts.size());
  for (const Variable& p : parts) sizes.push_back(p.size(a));
  return make_result(
      out, "concat", parts,
      [a, sizes](const Tensor& g, const FunctionNode& n) {
        std::vector<Tensor> grads(sizes.size());
        int64_t start = 0;
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (n.needs_input_grad(i)) grads[i] = kernels::slice(g, a, start, sizes[i]);
          start += sizes[i];
        }
        return grads;
      },
      [a, sizes](const Variable& g, const FunctionNode& n) {
        std::vector<Variable> grads(sizes.size());
        int64_t start = 0;
        for (size_t i = 0; i < sizes.size(); ++i) {
          if (n.needs_input_grad(i)) grads[i] = slice(g, a, start, sizes[i]);
          start += sizes[i];
        }
        return grads;
      });
}

namespace {

// slice's backward as a differentiable op: g placed at `start` of `axis` in zeros of
// `input_shape`. Its own backward is the slice it undoes, so slice and this op close over
// each other and every order is exact.
Variable slice_backward(const Variable& g, const Shape& input_shape, int64_t axis, int64_t start) {
  Tensor out = kernels::slice_backward(g.data(), input_shape, axis, start);  // checks axis and shapes
  int64_t a = axis < 0 ? axis + out.dim() : axis;
  int64_t length = g.size(a);
  return make_result(
      out, "slice_backward", {g},
      [a, start, length](const Tensor& gg, const FunctionNode&) {
        return std::vector<Tensor>{kernels::slice(gg, a, start, length)};
      },
      [a, start, length](const Variable& gg, const FunctionNode&) {
        return std::vector<Variable>{slice(gg, a, start, length)};
      });
}

}  // namespace

Variable slice(const Variable& x, int64_t axis, int64_t start, int64_t length) {
  return make_result(
      kernels::slice(x.data(), axis, start, length), "slice", {x},
      [shape = x.shape(), axis, start](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::slice_backward(g, shape, axis, start)};
      },
      [shape = x.shape(), axis, start](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{slice_backward(g, shape, axis, start)};
      });
}

Variable permute(const Variable& x, const std::vector<int64_t>& dims) {
  TANDEM_CHECK(x.defined(), "permute: undefined input");
  Tensor out = kernels::permute(x.data(), dims);  // checks that dims is a permutation of x's axes
  // The gradient goes back through the inverse permutation: output axis k came from input
  // axis dims[k], so input axis dims[k] takes gradient axis k.
  const int64_t d = x.dim();
  std::vector<int64_t> inverse(dims.size());
  for (int64_t k = 0; k < d; ++k) {
    const int64_t a =
        dims[static_cast<size_t>(k)] < 0 ? dims[static_cast<size_t>(k)] + d : dims[static_cast<size_t>(k)];
    inverse[static_cast<size_t>(a)] = k;
  }
  return make_result(
      out, "permute", {x},
      [inverse](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::permute(g, inverse)};
      },
      [inverse](const Variable& g, const FunctionNode&) {
        return std::vector<Variable>{permute(g, inverse)};
      });
}

Variable transpose(const Variable& x, int64_t dim0, int64_t dim1) {
  TANDEM_CHECK(x.defined(), "transpose: undefined input");
  const int64_t d = x.dim();
  for (int64_t dim : {dim0, dim1})
    TANDEM_CHECK(dim >= -d && dim < d, "transpose: dim " << dim << " (of dims " << dim0 << ", " << dim1
                                                         << ") is out of range for shape "
                                                         << shape_str(x.shape()));
  std::vector<int64_t> dims(static_cast<size_t>(d));
  for (int64_t k = 0; k < d; ++k) dims[static_cast<size_t>(k)] = k;
  std::swap(dims[static_cast<size_t>(dim0 < 0 ? dim0 + d : dim0)],
            dims[static_cast<size_t>(dim1 < 0 ? dim1 + d : dim1)]);
  return permute(x, dims);
}

}  // namespace tandem
