// Adam and SGD: one launch of the multi-tensor kernel (multi_tensor.cuh) updates a whole
// parameter group. The updates are written in its rounded operations (no FMA contraction).
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cuda/multi_tensor.cuh"
#include "kernels/cuda/optim_cuda.h"
#include "kernels/optim.h"

namespace tandem::kernels::cuda {

namespace {

using namespace multi_tensor_detail;  // Slot, launch, and what the ops build on

// Slot pointers: p, g, m, v.
template <typename T>
struct AdamOp {
  static constexpr int kUnroll = 4;
  static constexpr int64_t kChunk = 8192;
  T b1, one_b1, b2, one_b2, eps, l2, decay, step_size, bc2_sqrt;
  bool use_l2, use_decay;
  const double* scalars;  // non-null: step_size, bc2_sqrt and decay from here (a graph's step)

  template <int W, int U>
  __device__ __forceinline__ void operator()(const Slot& s, int64_t i, int64_t stride) const {
    T p[U][W], g[U][W], m[U][W], v[U][W];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      load<W>(s.ptr[0], i + u * stride, p[u]);
      load<W>(s.ptr[1], i + u * stride, g[u]);
      load<W>(s.ptr[2], i + u * stride, m[u]);
      load<W>(s.ptr[3], i + u * stride, v[u]);
    }
    const T step_size_t = scalars != nullptr ? static_cast<T>(scalars[0]) : step_size;
    const T bc2_sqrt_t = scalars != nullptr ? static_cast<T>(scalars[1]) : bc2_sqrt;
    const T decay_t = scalars != nullptr ? static_cast<T>(scalars[2]) : decay;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < W; ++k) {
        T gi = g[u][k], pi = p[u][k];
        if (use_l2) gi = add(gi, mul(l2, pi));
        if (use_decay) pi = mul(pi, decay_t);
        const T mi = add(mul(b1, m[u][k]), mul(one_b1, gi));
        const T vi = add(mul(b2, v[u][k]), mul(mul(one_b2, gi), gi));
        const T denom = add(div(sqrt_rn(vi), bc2_sqrt_t), eps);
        m[u][k] = mi;
        v[u][k] = vi;
        p[u][k] = sub(pi, mul(step_size_t, div(mi, denom)));
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      store<W>(s.ptr[0], i + u * stride, p[u]);
      store<W>(s.ptr[2], i + u * stride, m[u]);
      store<W>(s.ptr[3], i + u * stride, v[u]);
    }
  }
};

// Slot pointers: p, g, momentum buffer (null without momentum).
template <typename T>
struct SgdOp {
  static constexpr int kUnroll = 4;
  static constexpr int64_t kChunk = 8192;
  T lr, momentum, keep, wd;
  bool use_wd, use_momentum, nesterov, first;
  const double* scalars;  // non-null: lr from here (a graph's step)

  template <int W, int U>
  __device__ __forceinline__ void operator()(const Slot& s, int64_t i, int64_t stride) const {
    T p[U][W], g[U][W], b[U][W];
    const T lr_t = scalars != nullptr ? static_cast<T>(scalars[0]) : lr;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      load<W>(s.ptr[0], i + u * stride, p[u]);
      load<W>(s.ptr[1], i + u * stride, g[u]);
      if (use_momentum && !first) load<W>(s.ptr[2], i + u * stride, b[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int k = 0; k < W; ++k) {
        T gi = g[u][k];
        if (use_wd) gi = add(gi, mul(wd, p[u][k]));
        if (use_momentum) {
          b[u][k] = first ? gi : add(mul(momentum, b[u][k]), mul(keep, gi));
          gi = nesterov ? add(gi, mul(momentum, b[u][k])) : b[u][k];
        }
        p[u][k] = sub(p[u][k], mul(lr_t, gi));
      }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      store<W>(s.ptr[0], i + u * stride, p[u]);
      if (use_momentum) store<W>(s.ptr[2], i + u * stride, b[u]);
    }
  }
};

}  // namespace

void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                  const AdamStep& step) {
  if (params.empty()) return;
  std::vector<Slot> slots;
  slots.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    slots.push_back(make_slot(params[i].numel(), params[i].raw_data(), grads[i].raw_data(),
                              exp_avg[i].raw_data(), exp_avg_sq[i].raw_data()));
  const AdamCoeffs c = adam_coeffs(step);
  with_float_type(params[0].dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    AdamOp<T> op;
    op.b1 = static_cast<T>(c.beta1);
    op.one_b1 = static_cast<T>(1.0 - c.beta1);
    op.b2 = static_cast<T>(c.beta2);
    op.one_b2 = static_cast<T>(1.0 - c.beta2);
    op.eps = static_cast<T>(c.eps);
    op.l2 = static_cast<T>(c.l2);
    op.decay = static_cast<T>(c.decay);
    op.step_size = static_cast<T>(c.step_size);
    op.bc2_sqrt = static_cast<T>(c.bc2_sqrt);
    op.use_l2 = c.l2 != 0.0;
    op.use_decay =
        step.device_scalars != nullptr ? step.decoupled && step.weight_decay != 0.0 : c.decay != 1.0;
    op.scalars = step.device_scalars;
    launch<T>(params[0].device(), slots, op);
  });
}

void sgd_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& momentum_buffers, const SgdStep& step) {
  if (params.empty()) return;
  const bool use_momentum = step.momentum != 0.0;
  std::vector<Slot> slots;
  slots.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    slots.push_back(make_slot(params[i].numel(), params[i].raw_data(), grads[i].raw_data(),
                              use_momentum ? momentum_buffers[i].raw_data() : nullptr));
  with_float_type(params[0].dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    SgdOp<T> op;
    op.lr = static_cast<T>(step.lr);
    op.momentum = static_cast<T>(step.momentum);
    op.keep = static_cast<T>(1.0 - step.dampening);
    op.wd = static_cast<T>(step.weight_decay);
    op.use_wd = step.weight_decay != 0.0;
    op.use_momentum = use_momentum;
    op.nesterov = step.nesterov;
    op.first = step.first;
    op.scalars = step.device_scalars;
    launch<T>(params[0].device(), slots, op);
  });
}

double* graph_scalars_array(StepCapture& capture, Device device, size_t count) {
  TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
  if (std::getenv(kGraphScalarsFaultEnv) != nullptr) {  // the defect, for the GPU proof (kernels/optim.h)
    auto pooled = std::make_shared<Tensor>(Tensor::empty({static_cast<int64_t>(count)}, DType::f64, device));
    capture.keep_alive(pooled);
    return static_cast<double*>(pooled->raw_data());
  }
  void* array = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // not a stream operation
  TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t rc = cudaMalloc(&array, count * sizeof(double));
  TANDEM_CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  TANDEM_CHECK_CUDA(rc);
  capture.keep_alive(std::shared_ptr<void>(array, [](void* p) { cudaFree(p); }));
  return static_cast<double*>(array);
}

void write_graph_scalars(double* array, Device device, const std::vector<double>& values) {
  TANDEM_CHECK_CUDA(cudaSetDevice(device.index));
  TANDEM_CHECK_CUDA(cudaMemcpy(array, values.data(), values.size() * sizeof(double), cudaMemcpyHostToDevice));
}

}  // namespace tandem::kernels::cuda
