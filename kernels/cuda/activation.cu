// Activation kernels: one small functor per op for the map kernels of cuda_kernel_util.cuh,
// so the formulas read like their CPU twins (sigmoid and softplus branch on the sign of x,
// as there, so exp never overflows).
//
// bias_activation's backward is one pass: the channel sums of sums.cuh load each element
// once, and the load computes act'(y) * grad, stores it as grad_x and hands it to the sum.
#include <limits>

#include "kernels/bias_activation_backward.h"
#include "kernels/cuda/activation_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/sums.cuh"
#include "kernels/sign_class.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T>
__device__ T stable_softplus(T x) {
  return max_zero(x) + d_log1p(d_exp(-d_abs(x)));
}

// clang-format off
struct ReluOp {
  template <typename T> __device__ T operator()(T v) const { return max_zero(v); }  // NaN stays NaN
};
struct ReluBackwardOp {
  template <typename T> __device__ T operator()(T g, T v) const { return v > T(0) ? g : v <= T(0) ? T(0) : v; }
};
struct LeakyReluOp {
  double slope;
  template <typename T> __device__ T operator()(T v) const { return v > T(0) ? v : static_cast<T>(slope) * v; }
};
struct LeakyReluBackwardOp {
  double slope;
  template <typename T> __device__ T operator()(T g, T v) const {
    return v > T(0) ? g : v <= T(0) ? static_cast<T>(slope) * g : v;
  }
};
struct TanhOp {
  template <typename T> __device__ T operator()(T v) const { return d_tanh(v); }
};
struct TanhBackwardOp {
  template <typename T> __device__ T operator()(T g, T y) const { return g * (T(1) - y * y); }
};
struct SigmoidOp {
  template <typename T> __device__ T operator()(T v) const { return stable_sigmoid(v); }
};
struct SigmoidBackwardOp {
  template <typename T> __device__ T operator()(T g, T y) const { return g * y * (T(1) - y); }
};
struct SoftplusOp {
  template <typename T> __device__ T operator()(T v) const { return stable_softplus(v); }
};
struct SoftplusBackwardOp {
  template <typename T> __device__ T operator()(T g, T v) const { return g * stable_sigmoid(v); }
};
// clang-format on

// The fused op's activation, as the CPU twin's (its backward: kernels/bias_activation_backward.h).
template <typename T>
__device__ T activate(T v, Activation act, T slope) {
  switch (act) {
    case Activation::none:
      return v;
    case Activation::relu:
      return max_zero(v);
    case Activation::leaky_relu:
      return v > T(0) ? v : slope * v;
    case Activation::tanh:
      return d_tanh(v);
    case Activation::sigmoid:
      return stable_sigmoid(v);
  }
  return v;
}

template <typename T>
__global__ void bias_activation_kernel(const T* x, const T* bias, T* out, int64_t count, int64_t channels,
                                       int64_t inner, Activation act, T slope, T gain, T clamp) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = gain_clamp(activate(x[i] + bias[(i / inner) % channels], act, slope), gain, clamp);
}

template <typename T>
__global__ void sign_class_kernel(const T* x, uint8_t* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = sign_class_of(x[i]);
}

// out[i] = f(grad[i], c[i], nan) for the sign class c of the saved tensor.
template <typename T, typename F>
__global__ void sign_class_backward_kernel(const T* grad, const uint8_t* c, T* out, int64_t count, T nan,
                                           F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(grad[i], c[i], nan);
}

// clang-format off
struct ReluClassBackwardOp {
  template <typename T> __device__ T operator()(T g, uint8_t c, T nan) const { return relu_backward_from_class(g, c, nan); }
};
struct LeakyReluClassBackwardOp {
  double slope;
  template <typename T> __device__ T operator()(T g, uint8_t c, T nan) const {
    return leaky_relu_backward_from_class(g, c, static_cast<T>(slope), nan);
  }
};
// clang-format on

// The channel sums' load for the backward: grad_x[index] = act'(y) * grad, stored as it
// is summed (each element is loaded exactly once). act' is read from y, or, where y is null,
// from its sign class c (relu or leaky_relu, gain 1, no clamp).
template <typename T>
struct GradXLoad {
  const T* grad;
  const T* y;
  const uint8_t* c;
  T* grad_x;
  Activation act;
  T slope, gain, clamp, nan;
  __device__ double operator()(int64_t index, int64_t) const {
    const T g = y != nullptr ? gain_clamp_backward(grad[index], y[index], act, slope, gain, clamp)
                : act == Activation::relu ? relu_backward_from_class(grad[index], c[index], nan)
                                          : leaky_relu_backward_from_class(grad[index], c[index], slope, nan);
    grad_x[index] = g;
    return static_cast<double>(g);
  }
};

// out[i] = f(grad[i], saved[i]); the checks of the CPU activations' backward.
template <typename F>
Tensor activation_backward(const char* op, const Tensor& grad, const Tensor& saved, F f) {
  return binary(op, grad, "gradient", saved, "saved tensor", f);
}

// out[i] = f(grad[i], c[i], nan) for relu and leaky_relu given the sign class of their input
// (kernels/sign_class.h).
template <typename F>
Tensor sign_class_backward(const char* op, const Tensor& grad, const Tensor& saved, F f) {
  check_saved_sign(op, grad, saved, "saved tensor");
  require_cuda(op, grad);
  Tensor out = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  const int64_t n = grad.numel();
  if (n == 0) return out;
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    sign_class_backward_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<T>(grad), ptr<uint8_t>(saved), mut_ptr<T>(out), n, std::numeric_limits<T>::quiet_NaN(), f);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace

Tensor sign_class(const Tensor& x) {
  const char* op = "sign_class";
  check_defined(op, x, "input");
  require_cuda(op, x);
  Tensor out = Tensor::empty(x.shape(), DType::u8, x.device());
  const int64_t n = x.numel();
  if (n == 0) return out;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    sign_class_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(x), mut_ptr<uint8_t>(out), n);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor relu(const Tensor& x) { return unary("relu", "input", x, ReluOp{}); }
Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  if (x.dtype() == DType::u8) return sign_class_backward("relu_backward", grad, x, ReluClassBackwardOp{});
  return activation_backward("relu_backward", grad, x, ReluBackwardOp{});
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return unary("leaky_relu", "input", x, LeakyReluOp{slope});
}
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double slope) {
  if (x.dtype() == DType::u8)
    return sign_class_backward("leaky_relu_backward", grad, x, LeakyReluClassBackwardOp{slope});
  return activation_backward("leaky_relu_backward", grad, x, LeakyReluBackwardOp{slope});
}
Tensor tanh(const Tensor& x) { return unary("tanh", "input", x, TanhOp{}); }
Tensor tanh_backward(const Tensor& grad, const Tensor& y) {
  return activation_backward("tanh_backward", grad, y, TanhBackwardOp{});
}
Tensor sigmoid(const Tensor& x) { return unary("sigmoid", "input", x, SigmoidOp{}); }
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {
  return activation_backward("sigmoid_backward", grad, y, SigmoidBackwardOp{});
}
Tensor softplus(const Tensor& x) { return unary("softplus", "input", x, SoftplusOp{}); }
Tensor softplus_backward(const Tensor& grad, const Tensor& x) {
  return activation_backward("softplus_backward", grad, x, SoftplusBackwardOp{});
}

Tensor bias_activation(const Tensor& x, const Tensor& bias, Activation act, double slope, double gain,
                       double clamp) {
  const char* op = "bias_activation";
  check_bias_activation(op, x, bias, act, slope, gain, clamp);
  require_cuda(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t count = x.numel();
  if (count == 0) return out;
  const int64_t c = x.size(1), inner = count / (x.size(0) * c);
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    bias_activation_kernel<<<blocks_for(count), kThreads, 0, stream()>>>(
        ptr<T>(x), ptr<T>(bias), mut_ptr<T>(out), count, c, inner, act, static_cast<T>(slope),
        static_cast<T>(gain), static_cast<T>(clamp));
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

BiasActivationGrads bias_activation_backward(const Tensor& grad, const Tensor& y, Activation act,
                                             double slope, double gain, double clamp) {
  const char* op = "bias_activation_backward";
  check_bias_activation_backward(op, grad, y, act, slope, gain, clamp);
  require_cuda(op, grad);
  const int64_t n = grad.size(0), c = grad.size(1), inner = grad.numel() / (n * c == 0 ? 1 : n * c);
  BiasActivationGrads out{Tensor::empty(grad.shape(), grad.dtype(), grad.device()),
                          Tensor::empty({c}, grad.dtype(), grad.device())};
  set_device(grad);
  const bool from_class = y.dtype() == DType::u8;  // relu or leaky_relu, gain 1, no clamp: checked
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    channel_sums(
        grad.device(),
        GradXLoad<T>{ptr<T>(grad), from_class ? nullptr : ptr<T>(y), from_class ? ptr<uint8_t>(y) : nullptr,
                     mut_ptr<T>(out.x), act, static_cast<T>(slope), static_cast<T>(gain),
                     static_cast<T>(clamp), std::numeric_limits<T>::quiet_NaN()},
        mut_ptr<T>(out.bias), n, c, inner, int64_t{0});
  });
  return out;
}

}  // namespace tandem::kernels::cuda
