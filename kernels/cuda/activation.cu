// Activation kernels: one small functor per op for the map kernels of cuda_kernel_util.cuh,
// so the formulas read like their CPU twins (sigmoid and softplus branch on the sign of x,
// as there, so exp never overflows).
#include "kernels/cuda/activation_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"

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

// out[i] = f(grad[i], saved[i]); the checks of the CPU activations' backward.
template <typename F>
Tensor activation_backward(const char* op, const Tensor& grad, const Tensor& saved, F f) {
  return binary(op, grad, "gradient", saved, "saved tensor", f);
}

}  // namespace

Tensor relu(const Tensor& x) { return unary("relu", "input", x, ReluOp{}); }
Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  return activation_backward("relu_backward", grad, x, ReluBackwardOp{});
}
Tensor leaky_relu(const Tensor& x, double slope) {
  return unary("leaky_relu", "input", x, LeakyReluOp{slope});
}
Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double slope) {
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

}  // namespace tandem::kernels::cuda
