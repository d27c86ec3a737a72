// Elementwise kernels: one small functor per op for the grid-stride map kernels of
// cuda_kernel_util.cuh, so the formulas read like their CPU twins. bias_grad is a
// per-channel sum on the kernels of sums.cuh.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/elementwise_cuda.h"
#include "kernels/cuda/sums.cuh"
#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace tandem::kernels::cuda {

namespace {

template <typename T>
__global__ void add_bias_kernel(const T* x, const T* bias, T* out, int64_t count, int64_t channels,
                                int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = x[i] + bias[(i / inner) % channels];
}

template <typename T>
__global__ void where_kernel(const T* condition, const T* a, const T* b, T* out, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(blockDim.x) * gridDim.x)
    out[i] = math::select(condition[i], a[i], b[i]);
}

// The ops. Scalars arrive as double and are cast to T first, as on the CPU.
// clang-format off
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
// clang-format on

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary("add", a, "first operand", b, "second operand", AddOp{});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary("sub", a, "first operand", b, "second operand", SubOp{});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary("mul", a, "first operand", b, "second operand", MulOp{});
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary("div", a, "first operand", b, "second operand", DivOp{});
}
Tensor neg(const Tensor& a) { return unary("neg", "operand", a, NegOp{}); }
Tensor square(const Tensor& a) { return unary("square", "operand", a, SquareOp{}); }
Tensor sqrt(const Tensor& a) { return unary("sqrt", "operand", a, SqrtOp{}); }
Tensor exp(const Tensor& a) { return unary("exp", "operand", a, ExpOp{}); }
Tensor log(const Tensor& a) { return unary("log", "operand", a, LogOp{}); }
Tensor abs(const Tensor& a) { return unary("abs", "operand", a, math::AbsOp{}); }
Tensor sign(const Tensor& a) { return unary("sign", "operand", a, math::SignOp{}); }
Tensor pow_scalar(const Tensor& a, double p) { return unary("pow", "operand", a, math::PowOp{p}); }
Tensor clamp(const Tensor& a, double lo, double hi) {
  return unary("clamp", "operand", a, math::ClampOp{lo, hi});
}
Tensor clamp_mask(const Tensor& a, double lo, double hi) {
  return unary("clamp_mask", "operand", a, math::ClampMaskOp{lo, hi});
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary("maximum", a, "first operand", b, "second operand", math::MaximumOp{});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary("minimum", a, "first operand", b, "second operand", math::MinimumOp{});
}
Tensor compare(const Tensor& a, const Tensor& b, math::Comparison op) {
  return binary("compare", a, "first operand", b, "second operand", math::CompareOp{op});
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  const char* op = "where";
  check_same_layout(op, a, "first choice", b, "second choice");
  check_same_layout(op, condition, "condition", a, "first choice");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  const int64_t count = a.numel();
  if (count == 0) return out;
  set_device(a);
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    where_kernel<<<blocks_for(count), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(condition.raw_data()), static_cast<const T*>(a.raw_data()),
        static_cast<const T*>(b.raw_data()), static_cast<T*>(out.raw_data()), count);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

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
  check_channel_bias(op, x, bias);
  require_cuda(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t count = x.numel();
  if (count == 0) return out;
  const int64_t c = x.size(1), inner = count / (x.size(0) * c);
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    add_bias_kernel<<<blocks_for(count), kThreads, 0, ::tandem::cuda::compute_stream()>>>(
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(bias.raw_data()),
        static_cast<T*>(out.raw_data()), count, c, inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

Tensor bias_grad(const Tensor& grad) {
  const char* op = "bias_grad";
  check_defined(op, grad, "gradient");
  TANDEM_CHECK(grad.dim() >= 2, op << ": needs [N, C, ...], got " << shape_str(grad.shape()));
  require_cuda(op, grad);
  const int64_t n = grad.size(0), c = grad.size(1), inner = grad.numel() / (n * c == 0 ? 1 : n * c);
  Tensor out = Tensor::empty({c}, grad.dtype(), grad.device());
  set_device(grad);
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    channel_sums(grad.device(), Plain<T>{ptr<T>(grad)}, mut_ptr<T>(out), n, c, inner, int64_t{0});
  });
  return out;
}

}  // namespace tandem::kernels::cuda
