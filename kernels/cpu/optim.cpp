// Multi-tensor optimizer updates on the CPU: the twins of kernels/cuda/optim.cu, and the
// kernels autograd/optim.cpp's SGD and Adam run on CPU parameters.
#include "kernels/optim.h"

#include <cmath>
#include <type_traits>

#include "kernels/dispatch.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/optim_cuda.h"
#endif

namespace tandem::kernels {

namespace {

template <typename T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SgdStep& s) {
  const T lr = static_cast<T>(s.lr), momentum = static_cast<T>(s.momentum),
          wd = static_cast<T>(s.weight_decay);
  const T keep = static_cast<T>(1.0 - s.dampening);
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (s.weight_decay != 0.0) gi = gi + wd * p[i];
    if (buf != nullptr) {
      const T b = s.first ? gi : momentum * buf[i] + keep * gi;
      buf[i] = b;
      gi = s.nesterov ? gi + momentum * b : b;
    }
    p[i] = p[i] - lr * gi;
  }
}

// One pass over the parameter: every value is read and written once. The float path is
// written with AVX intrinsics because std::sqrt's errno handling keeps GCC from
// vectorising the loop (we cannot assume -fno-math-errno); it computes exactly what the
// scalar tail computes, operation by operation.
template <typename T>
void adam_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamCoeffs& c) {
  const T b1 = static_cast<T>(c.beta1), one_b1 = static_cast<T>(1.0 - c.beta1);
  const T b2 = static_cast<T>(c.beta2), one_b2 = static_cast<T>(1.0 - c.beta2);
  const T eps = static_cast<T>(c.eps), l2 = static_cast<T>(c.l2), decay = static_cast<T>(c.decay);
  const T step_size = static_cast<T>(c.step_size), bc2_sqrt = static_cast<T>(c.bc2_sqrt);
  const bool use_l2 = c.l2 != 0.0, use_decay = c.decay != 1.0;
  int64_t i = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    const __m256 vb1 = _mm256_set1_ps(b1), vone_b1 = _mm256_set1_ps(one_b1);
    const __m256 vb2 = _mm256_set1_ps(b2), vone_b2 = _mm256_set1_ps(one_b2);
    const __m256 veps = _mm256_set1_ps(eps), vl2 = _mm256_set1_ps(l2), vdecay = _mm256_set1_ps(decay);
    const __m256 vstep = _mm256_set1_ps(step_size), vbc2 = _mm256_set1_ps(bc2_sqrt);
    for (; i + 8 <= n; i += 8) {
      __m256 gi = _mm256_loadu_ps(g + i);
      __m256 pi = _mm256_loadu_ps(p + i);
      if (use_l2) gi = _mm256_add_ps(gi, _mm256_mul_ps(vl2, pi));
      if (use_decay) pi = _mm256_mul_ps(pi, vdecay);
      const __m256 mi = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(m + i)), _mm256_mul_ps(vone_b1, gi));
      const __m256 vi = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(v + i)),
                                      _mm256_mul_ps(_mm256_mul_ps(vone_b2, gi), gi));
      const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), vbc2), veps);
      pi = _mm256_sub_ps(pi, _mm256_mul_ps(vstep, _mm256_div_ps(mi, denom)));
      _mm256_storeu_ps(m + i, mi);
      _mm256_storeu_ps(v + i, vi);
      _mm256_storeu_ps(p + i, pi);
    }
  }
#endif
  for (; i < n; ++i) {
    T gi = g[i];
    T pi = p[i];
    if (use_l2) gi = gi + l2 * pi;
    if (use_decay) pi = pi * decay;
    const T mi = b1 * m[i] + one_b1 * gi;
    const T vi = b2 * v[i] + (one_b2 * gi) * gi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / denom);
  }
}

// Every tensor of `list` matches parameter i (defined, same shape, dtype and device).
void check_list(const char* op, const std::vector<Tensor>& params, const std::vector<Tensor>& list,
                const char* what) {
  TANDEM_CHECK(list.size() == params.size(),
               op << ": " << params.size() << " parameters but " << list.size() << " " << what << " tensors");
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    TANDEM_CHECK(t.defined() && t.shape() == p.shape() && t.dtype() == p.dtype() && t.device() == p.device(),
                 op << ": " << what << " #" << i << " "
                    << (t.defined() ? t.str() : std::string("(undefined)")) << " does not match parameter #"
                    << i << " " << p.str());
  }
}

// Parameters defined, float32 or float64, all on the first one's device and dtype.
void check_params(const char* op, const std::vector<Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TANDEM_CHECK(p.defined(), op << ": parameter #" << i << " is an undefined tensor");
    TANDEM_CHECK(
        p.dtype() == DType::f32 || p.dtype() == DType::f64,
        op << ": parameter #" << i << " is " << p.str() << "; only float32 and float64 are supported");
    TANDEM_CHECK(p.dtype() == params[0].dtype() && p.device() == params[0].device(),
                 op << ": parameter #" << i << " " << p.str()
                    << " differs in dtype or device from parameter #0 " << params[0].str()
                    << "; one call takes one device and one dtype");
  }
}

}  // namespace

AdamCoeffs adam_coeffs(const AdamStep& s) {
  AdamCoeffs c;
  c.beta1 = s.beta1;
  c.beta2 = s.beta2;
  c.eps = s.eps;
  c.l2 = s.decoupled ? 0.0 : s.weight_decay;
  c.decay = s.decoupled ? 1.0 - s.lr * s.weight_decay : 1.0;
  c.step_size = s.lr / (1.0 - std::pow(s.beta1, static_cast<double>(s.step)));
  c.bc2_sqrt = std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(s.step)));
  return c;
}

void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                  const AdamStep& step) {
  const char* op = "adam_update_";
  TANDEM_CHECK(step.step >= 1, op << ": step " << step.step << " must be >= 1");
  check_params(op, params);
  check_list(op, params, grads, "gradient");
  check_list(op, params, exp_avg, "exp_avg");
  check_list(op, params, exp_avg_sq, "exp_avg_sq");
  if (params.empty()) return;
  TANDEM_CUDA_ROUTE(params[0], cuda::adam_update_(params, grads, exp_avg, exp_avg_sq, step));
  require_cpu(op, params[0]);
  TANDEM_CHECK(step.device_scalars == nullptr, op << ": device_scalars are for CUDA parameters only");
  const AdamCoeffs c = adam_coeffs(step);
  dispatch_float(op, params[0].dtype(), [&]<typename T>() {
    for (size_t i = 0; i < params.size(); ++i)
      adam_update(params[i].data<T>(), grads[i].data<T>(), exp_avg[i].data<T>(), exp_avg_sq[i].data<T>(),
                  params[i].numel(), c);
  });
}

void sgd_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& momentum_buffers, const SgdStep& step) {
  const char* op = "sgd_update_";
  check_params(op, params);
  check_list(op, params, grads, "gradient");
  if (step.momentum != 0.0) {
    check_list(op, params, momentum_buffers, "momentum_buffer");
  } else {
    TANDEM_CHECK(momentum_buffers.empty(),
                 op << ": momentum is 0 but " << momentum_buffers.size() << " momentum buffers were given");
  }
  if (params.empty()) return;
  TANDEM_CUDA_ROUTE(params[0], cuda::sgd_update_(params, grads, momentum_buffers, step));
  require_cpu(op, params[0]);
  TANDEM_CHECK(step.device_scalars == nullptr, op << ": device_scalars are for CUDA parameters only");
  dispatch_float(op, params[0].dtype(), [&]<typename T>() {
    for (size_t i = 0; i < params.size(); ++i)
      sgd_update(params[i].data<T>(), grads[i].data<T>(),
                 momentum_buffers.empty() ? nullptr : momentum_buffers[i].data<T>(), params[i].numel(), step);
  });
}

double* graph_scalars_array(StepCapture& capture, Device device, size_t count) {
#if TANDEM_HAVE_CUDA
  if (device.is_cuda()) return cuda::graph_scalars_array(capture, device, count);
#endif
  TANDEM_FAIL("graph_scalars_array: device scalars are for CUDA devices only, not " << device.str());
  return nullptr;
}

void write_graph_scalars(double* array, Device device, const std::vector<double>& values) {
#if TANDEM_HAVE_CUDA
  if (device.is_cuda()) return cuda::write_graph_scalars(array, device, values);
#endif
  TANDEM_FAIL("write_graph_scalars: device scalars are for CUDA devices only, not " << device.str());
}

}  // namespace tandem::kernels
