// Elementwise, activation and loss kernels: one grid-stride kernel for unary and one for
// binary maps, each op a small functor so the formulas read like their CPU twins.
#include "kernels/cuda/activation_cuda.h"
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/loss_cuda.h"
#include "kernels/dispatch.h"

namespace tandem::kernels::cuda {

namespace {

// Math by overload. The names are qualified with :: because this namespace declares
// tensor functions called exp, log, sqrt and tanh, which would hide the device ones.
__device__ inline float d_exp(float x) { return ::expf(x); }
__device__ inline double d_exp(double x) { return ::exp(x); }
__device__ inline float d_log(float x) { return ::logf(x); }
__device__ inline double d_log(double x) { return ::log(x); }
__device__ inline float d_log1p(float x) { return ::log1pf(x); }
__device__ inline double d_log1p(double x) { return ::log1p(x); }
__device__ inline float d_sqrt(float x) { return ::sqrtf(x); }
__device__ inline double d_sqrt(double x) { return ::sqrt(x); }
__device__ inline float d_tanh(float x) { return ::tanhf(x); }
__device__ inline double d_tanh(double x) { return ::tanh(x); }
__device__ inline float d_abs(float x) { return ::fabsf(x); }
__device__ inline double d_abs(double x) { return ::fabs(x); }

// std::max(x, 0) as the CPU writes it: returns x unless x < 0 (so NaN stays NaN).
template <typename T>
__device__ T max_zero(T x) {
  return x < T(0) ? T(0) : x;
}

template <typename T>
__device__ T stable_sigmoid(T x) {
  if (x >= T(0)) return T(1) / (T(1) + d_exp(-x));
  const T e = d_exp(x);
  return e / (T(1) + e);
}

template <typename T>
__device__ T stable_softplus(T x) {
  return max_zero(x) + d_log1p(d_exp(-d_abs(x)));
}

template <typename T, typename F>
__global__ void unary_kernel(const T* x, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(x[i]);
}

// `out` may alias `a` (the in-place ops).
template <typename T, typename F>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(a[i], b[i]);
}

template <typename T, typename F>
__global__ void ternary_kernel(const T* a, const T* b, const T* c, T* out, int64_t count, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = f(a[i], b[i], c[i]);
}

template <typename T>
__global__ void add_bias_kernel(const T* x, const T* bias, T* out, int64_t count, int64_t channels, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = x[i] + bias[(i / inner) % channels];
}

// The ops. Scalars arrive as double and are cast to T first, as on the CPU.
struct AddOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct SubOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a - b; }
};
struct MulOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
};
struct DivOp {
  template <typename T> __device__ T operator()(T a, T b) const { return a / b; }
};
struct AxpyOp {
  double alpha;
  template <typename T> __device__ T operator()(T y, T x) const { return y + static_cast<T>(alpha) * x; }
};
struct NegOp {
  template <typename T> __device__ T operator()(T x) const { return -x; }
};
struct SquareOp {
  template <typename T> __device__ T operator()(T x) const { return x * x; }
};
struct SqrtOp {
  template <typename T> __device__ T operator()(T x) const { return d_sqrt(x); }
};
struct ExpOp {
  template <typename T> __device__ T operator()(T x) const { return d_exp(x); }
};
struct LogOp {
  template <typename T> __device__ T operator()(T x) const { return d_log(x); }
};
struct ScaleOp {
  double s;
  template <typename T> __device__ T operator()(T x) const { return static_cast<T>(s) * x; }
};
struct AddScalarOp {
  double s;
  template <typename T> __device__ T operator()(T x) const { return x + static_cast<T>(s); }
};

struct ReluOp {
  template <typename T> __device__ T operator()(T v) const { return v > T(0) ? v : T(0); }
};
struct ReluBackwardOp {
  template <typename T> __device__ T operator()(T g, T v) const { return v > T(0) ? g : T(0); }
};
struct LeakyReluOp {
  double slope;
  template <typename T> __device__ T operator()(T v) const { return v > T(0) ? v : static_cast<T>(slope) * v; }
};
struct LeakyReluBackwardOp {
  double slope;
  template <typename T> __device__ T operator()(T g, T v) const { return v > T(0) ? g : static_cast<T>(slope) * g; }
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
struct BceOp {
  template <typename T> __device__ T operator()(T x, T t) const {
    return max_zero(x) - x * t + d_log1p(d_exp(-d_abs(x)));
  }
};
struct BceBackwardOp {
  template <typename T> __device__ T operator()(T g, T x, T t) const { return g * (stable_sigmoid(x) - t); }
};

// dispatch.h's check_same_operands, on a GPU.
void check_same_layout(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  check_same_operands(op, a, a_name, b, b_name);
  require_cuda(op, a);
}

template <typename F>
void launch_unary(const char* op, const Tensor& x, Tensor& out, F f) {
  const int64_t n = x.numel();
  if (n == 0) return;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    unary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), n, f);
    TANDEM_CHECK_LAUNCH();
  });
}

template <typename F>
void launch_binary(const char* op, const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const int64_t n = a.numel();
  if (n == 0) return;
  set_device(a);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    binary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()), static_cast<T*>(out.raw_data()), n,
        f);
    TANDEM_CHECK_LAUNCH();
  });
}

template <typename F>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  check_same_layout(op, a, "first operand", b, "second operand");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  launch_binary(op, a, b, out, f);
  return out;
}

template <typename F>
Tensor unary(const char* op, const char* what, const Tensor& a, F f) {
  check_defined(op, a, what);
  require_cuda(op, a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  launch_unary(op, a, out, f);
  return out;
}

// out[i] = f(grad[i], saved[i]); the checks of the CPU activations' backward.
template <typename F>
Tensor activation_backward(const char* op, const Tensor& grad, const Tensor& saved, F f) {
  check_same_layout(op, grad, "gradient", saved, "saved tensor");
  Tensor out = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  launch_binary(op, grad, saved, out, f);
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary("add", a, b, AddOp{}); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary("sub", a, b, SubOp{}); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary("mul", a, b, MulOp{}); }
Tensor div(const Tensor& a, const Tensor& b) { return binary("div", a, b, DivOp{}); }
Tensor neg(const Tensor& a) { return unary("neg", "operand", a, NegOp{}); }
Tensor square(const Tensor& a) { return unary("square", "operand", a, SquareOp{}); }
Tensor sqrt(const Tensor& a) { return unary("sqrt", "operand", a, SqrtOp{}); }
Tensor exp(const Tensor& a) { return unary("exp", "operand", a, ExpOp{}); }
Tensor log(const Tensor& a) { return unary("log", "operand", a, LogOp{}); }
Tensor scale(const Tensor& a, double s) { return unary("scale", "operand", a, ScaleOp{s}); }
Tensor add_scalar(const Tensor& a, double s) { return unary("add_scalar", "operand", a, AddScalarOp{s}); }

void scale_(Tensor& a, double s) {
  check_defined("scale_", a, "operand");
  require_cuda("scale_", a);
  launch_unary("scale_", a, a, ScaleOp{s});
}

void axpy_(Tensor& y, double alpha, const Tensor& x) {
  check_same_layout("axpy_", y, "destination", x, "source");
  launch_binary("axpy_", y, x, y, AxpyOp{alpha});
}

void add_(Tensor& y, const Tensor& x) {
  check_same_layout("add_", y, "destination", x, "source");
  launch_binary("add_", y, x, y, AddOp{});
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  const char* op = "add_bias";
  check_defined(op, x, "input");
  check_defined(op, bias, "bias");
  TANDEM_CHECK(x.dim() >= 2 && bias.dim() == 1 && bias.size(0) == x.size(1),
               op << ": bias " << shape_str(bias.shape()) << " does not match channels (axis 1) of input "
                  << shape_str(x.shape()));
  check_same_dtype(op, x, bias);
  check_same_device(op, x, bias);
  require_cuda(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t count = x.numel();
  if (count == 0) return out;
  const int64_t c = x.size(1), inner = count / (x.size(0) * c);
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    add_bias_kernel<<<blocks_for(count), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(bias.raw_data()), static_cast<T*>(out.raw_data()),
        count, c, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor relu(const Tensor& x) { return unary("relu", "input", x, ReluOp{}); }
Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  return activation_backward("relu_backward", grad, x, ReluBackwardOp{});
}
Tensor leaky_relu(const Tensor& x, double slope) { return unary("leaky_relu", "input", x, LeakyReluOp{slope}); }
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

Tensor bce_with_logits(const Tensor& logits, const Tensor& targets) {
  const char* op = "bce_with_logits";
  check_same_layout(op, logits, "logits", targets, "targets");
  Tensor out = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  launch_binary(op, logits, targets, out, BceOp{});
  return out;
}

Tensor bce_with_logits_backward(const Tensor& grad, const Tensor& logits, const Tensor& targets) {
  const char* op = "bce_with_logits_backward";
  check_same_layout(op, logits, "logits", targets, "targets");
  check_same_operands(op, grad, "gradient", logits, "logits");
  Tensor out = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  const int64_t n = logits.numel();
  if (n == 0) return out;
  set_device(logits);
  dispatch_float(op, logits.dtype(), [&]<typename T>() {
    ternary_kernel<<<blocks_for(n), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(grad.raw_data()), static_cast<const T*>(logits.raw_data()),
        static_cast<const T*>(targets.raw_data()), static_cast<T*>(out.raw_data()), n, BceBackwardOp{});
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
