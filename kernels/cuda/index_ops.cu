// Index kernels. The gradient of index_select gives each element of x's gradient one thread
// that sums, in index order, the gradient slices whose index names its slice: the CPU
// twin's order, so the same bits and no atomics (the cost is x's slices times the index
// length, small for embedding tables and label batches).
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/index_ops_cuda.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T>
__global__ void index_select_kernel(const T* x, const int64_t* index, T* out, int64_t total, int64_t count,
                                    int64_t size, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = i % inner, j = (i / inner) % count, o = i / (inner * count);
    out[i] = x[(o * size + index[j]) * inner + k];
  }
}

template <typename T>
__global__ void index_select_backward_kernel(const T* grad, const int64_t* index, T* out, int64_t total,
                                             int64_t count, int64_t size, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = i % inner, r = (i / inner) % size, o = i / (inner * size);
    T sum = T(0);
    for (int64_t j = 0; j < count; ++j)
      if (index[j] == r) sum += grad[(o * count + j) * inner + k];
    out[i] = sum;
  }
}

// out holds zeros; each index element sets its class.
template <typename T>
__global__ void one_hot_kernel(const int64_t* index, T* out, int64_t count, int64_t classes) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i * classes + index[i]] = T(1);
}

}  // namespace

Tensor index_select(const Tensor& x, const Tensor& index, int64_t size, int64_t inner, Tensor out) {
  const char* op = "index_select";
  require_cuda(op, x);
  const int64_t total = out.numel();
  if (total == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    index_select_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(
        ptr<T>(x), ptr<int64_t>(index), mut_ptr<T>(out), total, index.numel(), size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor index_select_backward(const Tensor& grad, const Tensor& index, int64_t size, int64_t inner,
                             Tensor out) {
  const char* op = "index_select_backward";
  require_cuda(op, grad);
  const int64_t total = out.numel();
  if (total == 0) return out;
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    index_select_backward_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(
        ptr<T>(grad), ptr<int64_t>(index), mut_ptr<T>(out), total, index.numel(), size, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor one_hot(const Tensor& index, int64_t classes, Tensor out) {
  const char* op = "one_hot";
  require_cuda(op, index);
  const int64_t count = index.numel();
  if (count == 0) return out;
  set_device(index);
  dispatch_float(op, out.dtype(), [&]<typename T>() {
    one_hot_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(ptr<int64_t>(index), mut_ptr<T>(out), count,
                                                                 classes);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
