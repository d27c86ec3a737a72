// Activation kernels: plain loops. Sigmoid and softplus branch on the sign of x so that
// exp() only ever sees a non-positive argument and cannot overflow.
#include "kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/dispatch.h"
#include "kernels/sign_class.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/activation_cuda.h"
#endif

namespace tandem::kernels {

namespace {

template <typename T>
T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

template <typename T>
T stable_softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

template <typename F>
Tensor unary(const char* op, const Tensor& x, F f) {
  check_defined(op, x, "input");
  require_cpu(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = f(px[i]);
  });
  return out;
}

// out[i] = f(grad[i], saved[i]), where saved is the forward's input or output.
template <typename F>
Tensor backward(const char* op, const Tensor& grad, const Tensor& saved, F f) {
  check_same_layout(op, grad, "gradient", saved, "saved tensor");
  Tensor out = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    const T* ps = saved.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = grad.numel(); i < n; ++i) po[i] = f(pg[i], ps[i]);
  });
  return out;
}

// out[i] = f(grad[i], c[i], NaN) for the sign class c of the saved tensor (sign_class.h).
template <typename F>
Tensor sign_class_backward(const char* op, const Tensor& grad, const Tensor& c, F f) {
  check_saved_sign(op, grad, c, "saved tensor");
  require_cpu(op, grad);
  Tensor out = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    const uint8_t* pc = c.data<uint8_t>();
    T* po = out.data<T>();
    const T nan = std::numeric_limits<T>::quiet_NaN();
    for (int64_t i = 0, n = grad.numel(); i < n; ++i) po[i] = f(pg[i], pc[i], nan);
  });
  return out;
}

}  // namespace

Tensor sign_class(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::sign_class(x));
  const char* op = "sign_class";
  check_defined(op, x, "input");
  require_cpu(op, x);
  Tensor out = Tensor::empty(x.shape(), DType::u8, x.device());
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    uint8_t* po = out.data<uint8_t>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) po[i] = sign_class_of(px[i]);
  });
  return out;
}

void check_saved_sign(const char* op, const Tensor& grad, const Tensor& saved, const char* saved_name) {
  if (saved.dtype() != DType::u8) return check_same_operands(op, grad, "gradient", saved, saved_name);
  check_defined(op, grad, "gradient");
  check_same_shape(op, grad, saved);
  check_same_device(op, grad, saved);
}

Tensor relu(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::relu(x));
  // NaN in, NaN out (as PyTorch): only a number below zero becomes zero.
  return unary("relu", x, [](auto v) { return v < decltype(v)(0) ? decltype(v)(0) : v; });
}

Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  TANDEM_CUDA_ROUTE(grad, cuda::relu_backward(grad, x));
  if (x.dtype() == DType::u8) {
    return sign_class_backward("relu_backward", grad, x, [](auto g, uint8_t c, auto nan) {
      return relu_backward_from_class(g, c, nan);
    });
  }
  return backward("relu_backward", grad, x, [](auto g, auto v) {
    return v > decltype(v)(0) ? g : v <= decltype(v)(0) ? decltype(g)(0) : v;
  });
}

Tensor leaky_relu(const Tensor& x, double slope) {
  TANDEM_CUDA_ROUTE(x, cuda::leaky_relu(x, slope));
  // The slope is converted outside the branch: a conversion inside it may raise a float
  // exception, which keeps the compiler from vectorising the loop (-ftrapping-math).
  return unary("leaky_relu", x, [slope](auto v) {
    const auto s = static_cast<decltype(v)>(slope);
    return v > decltype(v)(0) ? v : s * v;
  });
}

Tensor leaky_relu_backward(const Tensor& grad, const Tensor& x, double slope) {
  TANDEM_CUDA_ROUTE(grad, cuda::leaky_relu_backward(grad, x, slope));
  if (x.dtype() == DType::u8) {
    return sign_class_backward("leaky_relu_backward", grad, x, [slope](auto g, uint8_t c, auto nan) {
      return leaky_relu_backward_from_class(g, c, static_cast<decltype(g)>(slope), nan);
    });
  }
  return backward("leaky_relu_backward", grad, x, [slope](auto g, auto v) {
    const auto s = static_cast<decltype(g)>(slope);  // outside the branch, as in leaky_relu
    return v > decltype(v)(0) ? g : v <= decltype(v)(0) ? s * g : v;
  });
}

Tensor tanh(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::tanh(x));
  return unary("tanh", x, [](auto v) { return std::tanh(v); });
}

Tensor tanh_backward(const Tensor& grad, const Tensor& y) {
  TANDEM_CUDA_ROUTE(grad, cuda::tanh_backward(grad, y));
  return backward("tanh_backward", grad, y, [](auto g, auto v) { return g * (decltype(v)(1) - v * v); });
}

Tensor sigmoid(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::sigmoid(x));
  return unary("sigmoid", x, [](auto v) { return stable_sigmoid(v); });
}

Tensor sigmoid_backward(const Tensor& grad, const Tensor& y) {
  TANDEM_CUDA_ROUTE(grad, cuda::sigmoid_backward(grad, y));
  return backward("sigmoid_backward", grad, y, [](auto g, auto v) { return g * v * (decltype(v)(1) - v); });
}

Tensor softplus(const Tensor& x) {
  TANDEM_CUDA_ROUTE(x, cuda::softplus(x));
  return unary("softplus", x, [](auto v) { return stable_softplus(v); });
}

Tensor softplus_backward(const Tensor& grad, const Tensor& x) {
  TANDEM_CUDA_ROUTE(grad, cuda::softplus_backward(grad, x));
  return backward("softplus_backward", grad, x, [](auto g, auto v) { return g * stable_sigmoid(v); });
}

}  // namespace tandem::kernels
