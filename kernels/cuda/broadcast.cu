// Broadcast kernels: one thread per output element maps its index to both operands
// (broadcast_layout.h). reduce_to_shape gives each output element one thread that sums its
// broadcast copies in row-major order, the order in which the CPU twin adds them, so no
// atomics and the same bits.
#include "kernels/broadcast_layout.h"
#include "kernels/cuda/broadcast_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"

namespace tandem::kernels::cuda {

namespace {

template <typename T, typename F>
__global__ void broadcast_kernel(const T* a, const T* b, T* out, int64_t count, BroadcastLayout l, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x) {
    int64_t ia, ib;
    broadcast_offsets(l, i, ia, ib);
    out[i] = f(a[ia], b[ib]);
  }
}

struct FirstFn {
  template <typename T>
  __device__ T operator()(T a, T) const {
    return a;
  }
};

// The axes of the gradient split in two: those the output keeps (its elements, row-major)
// and those summed away, each with the gradient's element stride.
struct ReduceLayout {
  int kept_rank = 0;
  int64_t kept_sizes[kMaxBroadcastDims] = {};
  int64_t kept_strides[kMaxBroadcastDims] = {};
  int summed_rank = 0;
  int64_t summed_sizes[kMaxBroadcastDims] = {};
  int64_t summed_strides[kMaxBroadcastDims] = {};
  int64_t summed_count = 1;
};

ReduceLayout make_reduce_layout(const Shape& grad_shape, const Shape& shape) {
  ReduceLayout r;
  const size_t lead = grad_shape.size() - shape.size();
  int64_t stride = 1;
  for (size_t d = grad_shape.size(); d-- > 0;) {
    const int64_t size = grad_shape[d];
    const bool summed = size != 1 && (d < lead || shape[d - lead] == 1);
    if (summed) {
      r.summed_sizes[r.summed_rank] = size;
      r.summed_strides[r.summed_rank++] = stride;
      r.summed_count *= size;
    } else {
      r.kept_sizes[r.kept_rank] = size;
      r.kept_strides[r.kept_rank++] = stride;
    }
    stride *= size;
  }
  return r;  // axes listed innermost first
}

// Element `i` of the row-major index space of `rank` axes given innermost first.
__device__ inline int64_t strided_offset(int64_t i, int rank, const int64_t* sizes, const int64_t* strides) {
  int64_t offset = 0;
  for (int d = 0; d < rank; ++d) {
    offset += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return offset;
}

template <typename T>
__global__ void reduce_to_shape_kernel(const T* grad, T* out, int64_t count, ReduceLayout r) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t base = strided_offset(i, r.kept_rank, r.kept_sizes, r.kept_strides);
    T sum = T(0);
    for (int64_t k = 0; k < r.summed_count; ++k)
      sum += grad[base + strided_offset(k, r.summed_rank, r.summed_sizes, r.summed_strides)];
    out[i] = sum;
  }
}

template <typename F>
void launch_broadcast(const char* op, const Tensor& a, const Tensor& b, const BroadcastLayout& l, Tensor& out,
                      F f) {
  const int64_t count = out.numel();
  if (count == 0) return;
  set_device(out);
  dispatch_float(op, out.dtype(), [&]<typename T>() {
    broadcast_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(a), ptr<T>(b), mut_ptr<T>(out),
                                                                   count, l, f);
    TANDEM_CHECK_LAUNCH();
  });
}

}  // namespace

Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor out) {
  const char* name = binary_op_name(op);
  require_cuda(name, a);
  const BroadcastLayout l = make_broadcast_layout(out.shape(), a.shape(), b.shape());
  visit_binary_op(op, [&](auto f) { launch_broadcast(name, a, b, l, out, f); });
  return out;
}

Tensor broadcast_to(const Tensor& x, Tensor out) {
  require_cuda("broadcast_to", x);
  const BroadcastLayout l = make_broadcast_layout(out.shape(), x.shape(), x.shape());
  launch_broadcast("broadcast_to", x, x, l, out, FirstFn{});
  return out;
}

Tensor reduce_to_shape(const Tensor& grad, Tensor out) {
  const char* op = "reduce_to_shape";
  require_cuda(op, grad);
  const int64_t count = out.numel();
  if (count == 0 || grad.numel() == 0) return out;  // out holds zeros
  const ReduceLayout r = make_reduce_layout(grad.shape(), out.shape());
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    reduce_to_shape_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<T>(grad), mut_ptr<T>(out), count,
                                                                         r);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
