// Bias + activation: plain loops over [N, C, inner] that do, element by element, what
// add_bias, the activation and bias_grad do, so the fused path rounds exactly as the
// unfused one (kernels/bias_activation.h).
#include "kernels/bias_activation.h"

#include <cmath>
#include <limits>

#include "kernels/bias_activation_backward.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"
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

// The activation is a template argument, so that the loops below hold no switch and the
// compiler vectorises those it can (none, relu, leaky_relu).
template <Activation kAct, typename T>
T activate(T v, T slope) {
  if constexpr (kAct == Activation::relu) return v < T(0) ? T(0) : v;
  if constexpr (kAct == Activation::leaky_relu) return v > T(0) ? v : slope * v;
  if constexpr (kAct == Activation::tanh) return std::tanh(v);
  if constexpr (kAct == Activation::sigmoid) return stable_sigmoid(v);
  return v;
}

// Calls fn.template operator()<kAct>() for act's value.
template <typename Fn>
void with_activation(Activation act, Fn&& fn) {
  switch (act) {
    case Activation::none:
      return fn.template operator()<Activation::none>();
    case Activation::relu:
      return fn.template operator()<Activation::relu>();
    case Activation::leaky_relu:
      return fn.template operator()<Activation::leaky_relu>();
    case Activation::tanh:
      return fn.template operator()<Activation::tanh>();
    case Activation::sigmoid:
      return fn.template operator()<Activation::sigmoid>();
  }
}

// x as [n, c, inner].
void split_channels(const Tensor& x, int64_t& n, int64_t& c, int64_t& inner) {
  n = x.size(0);
  c = x.size(1);
  inner = x.numel() / (n * c == 0 ? 1 : n * c);
}

}  // namespace

const char* activation_name(Activation act) {
  switch (act) {
    case Activation::none:
      return "none";
    case Activation::relu:
      return "relu";
    case Activation::leaky_relu:
      return "leaky_relu";
    case Activation::tanh:
      return "tanh";
    case Activation::sigmoid:
      return "sigmoid";
  }
  return "?";
}

void check_activation_slope(const char* op, Activation act, double slope) {
  TANDEM_CHECK(
      act != Activation::leaky_relu || (slope > 0 && std::isfinite(slope)),
      op << ": leaky_relu needs a finite slope > 0 (the backward reads the sign from the output), got "
         << slope);
}

void check_gain_clamp(const char* op, double gain, double clamp) {
  TANDEM_CHECK(
      gain > 0 && std::isfinite(gain),
      op << ": the gain must be finite and > 0 (the backward reads the activation from y / gain), got "
         << gain);
  TANDEM_CHECK(!std::isnan(clamp), op << ": the clamp is NaN (use a negative clamp for none)");
}

void check_bias_activation(const char* op, const Tensor& x, const Tensor& bias, Activation act, double slope,
                           double gain, double clamp) {
  check_channel_bias(op, x, bias);
  check_activation_slope(op, act, slope);
  check_gain_clamp(op, gain, clamp);
}

void check_bias_activation_backward(const char* op, const Tensor& grad, const Tensor& y, Activation act,
                                    double slope, double gain, double clamp) {
  check_saved_sign(op, grad, y, "output");
  TANDEM_CHECK(grad.dim() >= 2, op << ": needs [N, C, ...], got " << shape_str(grad.shape()));
  check_activation_slope(op, act, slope);
  check_gain_clamp(op, gain, clamp);
  TANDEM_CHECK(y.dtype() != DType::u8 || sign_class_stands_for_output(act, gain, clamp),
               op << ": the output's sign class stands for it only for relu and leaky_relu without gain or "
                     "clamp, not for "
                  << activation_name(act) << " with gain " << gain << " and clamp " << clamp);
}

bool sign_class_stands_for_output(Activation act, double gain, double clamp) {
  return (act == Activation::relu || act == Activation::leaky_relu) && gain == 1.0 && clamp < 0.0;
}

Tensor bias_activation(const Tensor& x, const Tensor& bias, Activation act, double slope, double gain,
                       double clamp) {
  TANDEM_CUDA_ROUTE(x, cuda::bias_activation(x, bias, act, slope, gain, clamp));
  const char* op = "bias_activation";
  check_bias_activation(op, x, bias, act, slope, gain, clamp);
  require_cpu(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  int64_t n = 0, c = 0, inner = 0;
  split_channels(x, n, c, inner);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    T* po = out.data<T>();
    const T s = static_cast<T>(slope), gn = static_cast<T>(gain), cl = static_cast<T>(clamp);
    with_activation(act, [&]<Activation kAct>() {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < c; ++j) {
          const int64_t base = (i * c + j) * inner;
          const T b = pb[j];
          for (int64_t k = 0; k < inner; ++k)
            po[base + k] = gain_clamp(activate<kAct>(px[base + k] + b, s), gn, cl);
        }
    });
  });
  return out;
}

BiasActivationGrads bias_activation_backward(const Tensor& grad, const Tensor& y, Activation act,
                                             double slope, double gain, double clamp) {
  TANDEM_CUDA_ROUTE(grad, cuda::bias_activation_backward(grad, y, act, slope, gain, clamp));
  const char* op = "bias_activation_backward";
  check_bias_activation_backward(op, grad, y, act, slope, gain, clamp);
  require_cpu(op, grad);
  int64_t n = 0, c = 0, inner = 0;
  split_channels(grad, n, c, inner);
  BiasActivationGrads out{Tensor::empty(grad.shape(), grad.dtype(), grad.device()),
                          Tensor::zeros({c}, grad.dtype(), grad.device())};
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* px = out.x.data<T>();
    T* pb = out.bias.data<T>();
    const T s = static_cast<T>(slope), gn = static_cast<T>(gain), cl = static_cast<T>(clamp);
    // Per channel of a sample: grad_x[k] = grad_x_at(k) over the channel's elements, then
    // their sum, in order. Two loops, so that the first, with no sum to carry, vectorises:
    // in one loop the sum's latency and a branch on each element's sign (mispredicted half
    // the time) took 4x as long. Every value and the summation order are unchanged.
    auto channels = [&](auto grad_x_at) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < c; ++j) {
          const int64_t base = (i * c + j) * inner;
          for (int64_t k = base; k < base + inner; ++k) px[k] = grad_x_at(k);
          T sum = 0;
          for (int64_t k = base; k < base + inner; ++k) sum += px[k];
          pb[j] += sum;
        }
    };
    if (y.dtype() == DType::u8) {  // relu or leaky_relu, gain 1, no clamp: the check says so
      const uint8_t* pc = y.data<uint8_t>();
      const T nan = std::numeric_limits<T>::quiet_NaN();
      if (act == Activation::relu) {
        channels([&](int64_t k) { return relu_backward_from_class(pg[k], pc[k], nan); });
      } else {
        channels([&](int64_t k) { return leaky_relu_backward_from_class(pg[k], pc[k], s, nan); });
      }
      return;
    }
    const T* py = y.data<T>();
    with_activation(act, [&]<Activation kAct>() {
      channels([&](int64_t k) { return gain_clamp_backward(pg[k], py[k], kAct, s, gn, cl); });
    });
  });
  return out;
}

}  // namespace tandem::kernels
