// Elementwise kernels: plain loops the compiler vectorises.
#include "kernels/elementwise.h"

#include <cmath>
#include <utility>

#include "kernels/broadcast.h"
#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/elementwise_cuda.h"
#endif

namespace tandem::kernels {

namespace {

template <typename F>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, F f) {
  check_same_layout(op, a, "first operand", b, "second operand");  // a CPU one: routed already
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = f(pa[i], pb[i]);
  });
  return out;
}

template <typename F>
Tensor unary(const char* op, const Tensor& a, F f) {
  check_defined(op, a, "operand");
  require_cpu(op, a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = f(pa[i]);
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  if (shapes_differ(a, b)) return broadcast_binary(BinaryOp::add, a, b);
  TANDEM_CUDA_ROUTE(a, cuda::add(a, b));
  return binary("add", a, b, [](auto x, auto y) { return x + y; });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  if (shapes_differ(a, b)) return broadcast_binary(BinaryOp::sub, a, b);
  TANDEM_CUDA_ROUTE(a, cuda::sub(a, b));
  return binary("sub", a, b, [](auto x, auto y) { return x - y; });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  if (shapes_differ(a, b)) return broadcast_binary(BinaryOp::mul, a, b);
  TANDEM_CUDA_ROUTE(a, cuda::mul(a, b));
  return binary("mul", a, b, [](auto x, auto y) { return x * y; });
}
Tensor div(const Tensor& a, const Tensor& b) {
  if (shapes_differ(a, b)) return broadcast_binary(BinaryOp::div, a, b);
  TANDEM_CUDA_ROUTE(a, cuda::div(a, b));
  return binary("div", a, b, [](auto x, auto y) { return x / y; });
}
Tensor neg(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::neg(a));
  return unary("neg", a, [](auto x) { return -x; });
}
Tensor square(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::square(a));
  return unary("square", a, [](auto x) { return x * x; });
}
Tensor sqrt(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::sqrt(a));
  return unary("sqrt", a, [](auto x) { return std::sqrt(x); });
}
Tensor exp(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::exp(a));
  return unary("exp", a, [](auto x) { return std::exp(x); });
}
Tensor log(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::log(a));
  return unary("log", a, [](auto x) { return std::log(x); });
}

Tensor abs(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::abs(a));
  return unary("abs", a, math::AbsOp{});
}
Tensor sign(const Tensor& a) {
  TANDEM_CUDA_ROUTE(a, cuda::sign(a));
  return unary("sign", a, math::SignOp{});
}
Tensor pow_scalar(const Tensor& a, double p) {
  TANDEM_CUDA_ROUTE(a, cuda::pow_scalar(a, p));
  return unary("pow", a, math::PowOp{p});
}

namespace {

void check_clamp_bounds(double lo, double hi) {
  TANDEM_CHECK(!std::isnan(lo) && !std::isnan(hi) && lo <= hi,
               "clamp: lower bound " << lo << " and upper bound " << hi << ": need lo <= hi (neither NaN)");
}

}  // namespace

Tensor clamp(const Tensor& a, double lo, double hi) {
  check_clamp_bounds(lo, hi);
  TANDEM_CUDA_ROUTE(a, cuda::clamp(a, lo, hi));
  return unary("clamp", a, math::ClampOp{lo, hi});
}
Tensor clamp_mask(const Tensor& a, double lo, double hi) {
  check_clamp_bounds(lo, hi);
  TANDEM_CUDA_ROUTE(a, cuda::clamp_mask(a, lo, hi));
  return unary("clamp_mask", a, math::ClampMaskOp{lo, hi});
}

namespace {

// a and b repeated to their common shape (each itself when it has it already).
std::pair<Tensor, Tensor> broadcast_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "first operand");
  check_defined(op, b, "second operand");
  if (a.shape() == b.shape()) return {a, b};
  const Shape shape = broadcast_shape(op, a.shape(), b.shape());
  return {a.shape() == shape ? a : broadcast_to(a, shape), b.shape() == shape ? b : broadcast_to(b, shape)};
}

}  // namespace

Tensor maximum(const Tensor& a0, const Tensor& b0) {
  const auto [a, b] = broadcast_pair("maximum", a0, b0);
  TANDEM_CUDA_ROUTE(a, cuda::maximum(a, b));
  return binary("maximum", a, b, math::MaximumOp{});
}
Tensor minimum(const Tensor& a0, const Tensor& b0) {
  const auto [a, b] = broadcast_pair("minimum", a0, b0);
  TANDEM_CUDA_ROUTE(a, cuda::minimum(a, b));
  return binary("minimum", a, b, math::MinimumOp{});
}
Tensor compare(const Tensor& a0, const Tensor& b0, Comparison op) {
  const auto [a, b] = broadcast_pair("compare", a0, b0);
  TANDEM_CUDA_ROUTE(a, cuda::compare(a, b, op));
  return binary("compare", a, b, math::CompareOp{op});
}

Tensor where(const Tensor& condition0, const Tensor& a0, const Tensor& b0) {
  const char* op = "where";
  check_defined(op, condition0, "condition");
  auto [a, b] = broadcast_pair(op, a0, b0);
  Tensor condition = condition0;
  if (condition.shape() != a.shape()) {
    const Shape shape = broadcast_shape(op, condition.shape(), a.shape());
    if (condition.shape() != shape) condition = broadcast_to(condition, shape);
    if (a.shape() != shape) a = broadcast_to(a, shape);
    if (b.shape() != shape) b = broadcast_to(b, shape);
  }
  check_same_operands(op, a, "first choice", b, "second choice");
  check_same_operands(op, condition, "condition", a, "first choice");
  TANDEM_CUDA_ROUTE(a, cuda::where(condition, a, b));
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  dispatch_float(op, a.dtype(), [&]<typename T>() {
    const T* pc = condition.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = math::select(pc[i], pa[i], pb[i]);
  });
  return out;
}

Tensor scale(const Tensor& a, double s) {
  TANDEM_CUDA_ROUTE(a, cuda::scale(a, s));
  return unary("scale", a, [s](auto x) { return static_cast<decltype(x)>(s) * x; });
}

Tensor add_scalar(const Tensor& a, double s) {
  TANDEM_CUDA_ROUTE(a, cuda::add_scalar(a, s));
  return unary("add_scalar", a, [s](auto x) { return x + static_cast<decltype(x)>(s); });
}

void scale_(Tensor& a, double s) {
  TANDEM_CUDA_ROUTE(a, cuda::scale_(a, s));
  check_defined("scale_", a, "operand");
  require_cpu("scale_", a);
  dispatch_float("scale_", a.dtype(), [&]<typename T>() {
    T* p = a.data<T>();
    T f = static_cast<T>(s);
    for (int64_t i = 0, n = a.numel(); i < n; ++i) p[i] *= f;
  });
}

void axpy_(Tensor& y, double alpha, const Tensor& x) {
  TANDEM_CUDA_ROUTE(y, cuda::axpy_(y, alpha, x));
  check_same_layout("axpy_", y, "destination", x, "source");
  dispatch_float("axpy_", y.dtype(), [&]<typename T>() {
    T* py = y.data<T>();
    const T* px = x.data<T>();
    T a = static_cast<T>(alpha);
    for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] += a * px[i];
  });
}

void add_(Tensor& y, const Tensor& x) {
  TANDEM_CUDA_ROUTE(y, cuda::add_(y, x));
  check_same_layout("add_", y, "destination", x, "source");
  dispatch_float("add_", y.dtype(), [&]<typename T>() {
    T* py = y.data<T>();
    const T* px = x.data<T>();
    for (int64_t i = 0, n = y.numel(); i < n; ++i) py[i] += px[i];
  });
}

void check_channel_bias(const char* op, const Tensor& x, const Tensor& bias) {
  check_defined(op, x, "input");
  check_defined(op, bias, "bias");
  TANDEM_CHECK(x.dim() >= 2 && bias.dim() == 1 && bias.size(0) == x.size(1),
               op << ": bias " << shape_str(bias.shape()) << " does not match channels (axis 1) of input "
                  << shape_str(x.shape()));
  check_same_dtype(op, x, bias);
  check_same_device(op, x, bias);
}

Tensor add_bias(const Tensor& x, const Tensor& bias) {
  TANDEM_CUDA_ROUTE(x, cuda::add_bias(x, bias));
  const char* op = "add_bias";
  check_channel_bias(op, x, bias);
  require_cpu(op, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  int64_t n = x.size(0), c = x.size(1), inner = x.numel() / (n * c == 0 ? 1 : n * c);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = x.data<T>();
    const T* pb = bias.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) {
        int64_t base = (i * c + j) * inner;
        for (int64_t k = 0; k < inner; ++k) po[base + k] = px[base + k] + pb[j];
      }
  });
  return out;
}

Tensor bias_grad(const Tensor& grad) {
  TANDEM_CUDA_ROUTE(grad, cuda::bias_grad(grad));
  const char* op = "bias_grad";
  check_defined(op, grad, "gradient");
  TANDEM_CHECK(grad.dim() >= 2, op << ": needs [N, C, ...], got " << shape_str(grad.shape()));
  require_cpu(op, grad);
  int64_t n = grad.size(0), c = grad.size(1), inner = grad.numel() / (n * c == 0 ? 1 : n * c);
  Tensor out = Tensor::zeros({c}, grad.dtype(), grad.device());
  dispatch_float(op, grad.dtype(), [&]<typename T>() {
    const T* pg = grad.data<T>();
    T* po = out.data<T>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) {
        const T* row = pg + (i * c + j) * inner;
        T s = 0;
        for (int64_t k = 0; k < inner; ++k) s += row[k];
        po[j] += s;
      }
  });
  return out;
}

}  // namespace tandem::kernels
