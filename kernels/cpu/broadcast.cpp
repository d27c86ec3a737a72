// Broadcasting: the checks and output shapes for both devices, and the CPU twins. An output
// row (the last axis) is a strided loop over each operand, so the index arithmetic runs
// once per row rather than once per element.
#include "kernels/broadcast.h"

#include <algorithm>
#include <type_traits>

#include "kernels/broadcast_layout.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/broadcast_cuda.h"
#endif

namespace tandem::kernels {

namespace {

// The same elements in fewer, longer rows: an axis merges into the next one when both
// operands step through the pair as through one axis (x [N, C, H, W] with b [N, C, 1, 1]:
// rows of H W, b's step 0). Size-1 axes go. The visiting order is unchanged.
BroadcastLayout merged_axes(const BroadcastLayout& l) {
  BroadcastLayout m;
  for (int d = 0; d < l.rank; ++d) {
    if (l.sizes[d] == 1) continue;
    if (m.rank > 0) {
      const int last = m.rank - 1;
      if (m.a_strides[last] == l.a_strides[d] * l.sizes[d] &&
          m.b_strides[last] == l.b_strides[d] * l.sizes[d]) {
        m.sizes[last] *= l.sizes[d];
        m.a_strides[last] = l.a_strides[d];
        m.b_strides[last] = l.b_strides[d];
        continue;
      }
    }
    m.sizes[m.rank] = l.sizes[d];
    m.a_strides[m.rank] = l.a_strides[d];
    m.b_strides[m.rank] = l.b_strides[d];
    ++m.rank;
  }
  return m;
}

template <typename F, typename AStep, typename BStep>
void for_each_row(const BroadcastLayout& l, int64_t count, int64_t inner, AStep a_step, BStep b_step, F f) {
  for (int64_t i = 0; i < count; i += inner) {
    int64_t a_offset, b_offset;
    broadcast_offsets(l, i, a_offset, b_offset);
    for (int64_t k = 0; k < inner; ++k) f(i + k, a_offset + k * a_step, b_offset + k * b_step);
  }
}

// Calls f(i, a_offset, b_offset) for every output element i of the layout, in order. The
// common steps along a row (1 and 0) are compile-time constants, so that the loop vectorises.
template <typename F>
void for_each_element(const BroadcastLayout& layout, int64_t count, F f) {
  const BroadcastLayout l = merged_axes(layout);
  const int64_t inner = l.rank ? l.sizes[l.rank - 1] : 1;
  const int64_t a_step = l.rank ? l.a_strides[l.rank - 1] : 0;
  const int64_t b_step = l.rank ? l.b_strides[l.rank - 1] : 0;
  using One = std::integral_constant<int64_t, 1>;
  using Zero = std::integral_constant<int64_t, 0>;
  if (a_step == 1 && b_step == 1) {
    for_each_row(l, count, inner, One{}, One{}, f);
  } else if (a_step == 1 && b_step == 0) {
    for_each_row(l, count, inner, One{}, Zero{}, f);
  } else if (a_step == 0 && b_step == 1) {
    for_each_row(l, count, inner, Zero{}, One{}, f);
  } else {
    for_each_row(l, count, inner, a_step, b_step, f);
  }
}

// `shape` broadcasts to `target` without changing it (the shapes of reduce_to_shape and
// broadcast_to); an Error naming the op and both shapes otherwise.
void check_broadcasts_to(const char* op, const Shape& shape, const Shape& target) {
  bool ok = shape.size() <= target.size() && target.size() <= size_t(kMaxBroadcastDims);
  const size_t lead = target.size() - shape.size();
  for (size_t d = 0; ok && d < shape.size(); ++d) ok = shape[d] == 1 || shape[d] == target[d + lead];
  TANDEM_CHECK(ok, op << ": shape " << shape_str(shape) << " does not broadcast to " << shape_str(target));
}

}  // namespace

const char* binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add:
      return "add";
    case BinaryOp::sub:
      return "sub";
    case BinaryOp::mul:
      return "mul";
    case BinaryOp::div:
      return "div";
  }
  return "binary";
}

Shape broadcast_shape(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  bool ok = rank <= size_t(kMaxBroadcastDims);
  for (size_t d = 0; ok && d < rank; ++d) {
    // Aligned at the last axis: a missing leading axis is size 1.
    const int64_t sa = d + a.size() < rank ? 1 : a[d + a.size() - rank];
    const int64_t sb = d + b.size() < rank ? 1 : b[d + b.size() - rank];
    ok = sa == sb || sa == 1 || sb == 1;
    out[d] = sa == 1 ? sb : sa;
  }
  TANDEM_CHECK(ok, op << ": shapes " << shape_str(a) << " and " << shape_str(b) << " do not broadcast"
                      << (rank > size_t(kMaxBroadcastDims) ? " (more than 8 axes)" : ""));
  return out;
}

Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_defined(name, a, "first operand");
  check_defined(name, b, "second operand");
  check_same_dtype(name, a, b);
  check_same_device(name, a, b);
  require_kernel_device(name, a);
  const Shape out_shape = broadcast_shape(name, a.shape(), b.shape());
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  TANDEM_CUDA_ROUTE(a, cuda::broadcast_binary(op, a, b, out));
  const BroadcastLayout l = make_broadcast_layout(out_shape, a.shape(), b.shape());
  dispatch_float(name, a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    visit_binary_op(op, [&](auto f) {
      for_each_element(l, out.numel(), [&](int64_t i, int64_t ia, int64_t ib) { po[i] = f(pa[ia], pb[ib]); });
    });
  });
  return out;
}

Tensor reduce_to_shape(const Tensor& grad, const Shape& shape) {
  const char* op = "reduce_to_shape";
  check_defined(op, grad, "gradient");
  if (grad.shape() == shape) return grad;
  check_broadcasts_to(op, shape, grad.shape());
  require_kernel_device(op, grad);
  Tensor out = Tensor::zeros(shape, grad.dtype(), grad.device());
  TANDEM_CUDA_ROUTE(grad, cuda::reduce_to_shape(grad, out));
  const BroadcastLayout l = make_broadcast_layout(grad.shape(), grad.shape(), shape);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    for_each_element(l, grad.numel(), [&](int64_t i, int64_t, int64_t io) { po[io] += pg[i]; });
  });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  const char* op = "broadcast_to";
  check_defined(op, x, "input");
  check_broadcasts_to(op, x.shape(), shape);
  require_kernel_device(op, x);
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  TANDEM_CUDA_ROUTE(x, cuda::broadcast_to(x, out));
  const BroadcastLayout l = make_broadcast_layout(shape, x.shape(), x.shape());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for_each_element(l, out.numel(), [&](int64_t i, int64_t ix, int64_t) { po[i] = px[ix]; });
  });
  return out;
}

}  // namespace tandem::kernels
