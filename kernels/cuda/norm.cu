// Batch norm. The per-channel statistics run on the sums of sums.cuh (double, the variance
// in a second pass about the mean, as on the CPU); small per-channel kernels turn them into
// coefficients, and one elementwise pass applies them.
#include "kernels/cuda/cuda_kernel_util.cuh"
#include "kernels/cuda/norm_cuda.h"
#include "kernels/cuda/sums.cuh"
#include "kernels/dispatch.h"
#include "kernels/norm_layout.h"

namespace tandem::kernels::cuda {

namespace {

// The batch-norm terms of the channel sums (load(index, channel), as Plain in sums.cuh).
template <typename T>
struct CenteredSquare {  // (x - mean)^2, for the variance about the mean
  const T* x;
  const double* mean;
  __device__ double operator()(int64_t index, int64_t channel) const {
    const double d = static_cast<double>(x[index]) - mean[channel];
    return d * d;
  }
};

template <typename T>
struct GradCentered {  // g (x - mean), for the batch-norm backward
  const T* grad;
  const T* x;
  const T* mean;
  __device__ double operator()(int64_t index, int64_t channel) const {
    return static_cast<double>(grad[index]) *
           (static_cast<double>(x[index]) - static_cast<double>(mean[channel]));
  }
};

// y = (x - T(center[ch])) * T(a[ch]) + T(b[ch]) with ch the channel (axis 1) of x as
// [n, c, inner]; the per-channel values are double, cast to T as on the CPU.
template <typename T>
__global__ void affine_kernel(const T* x, const double* center, const double* a, const double* b, T* y,
                              int64_t count, int64_t c, int64_t inner) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ch = (idx / inner) % c;
    y[idx] = (x[idx] - static_cast<T>(center[ch])) * static_cast<T>(a[ch]) + static_cast<T>(b[ch]);
  }
}

using norm_detail::check_channel;
using norm_detail::Layout;

Layout layout_of(const char* op, const Tensor& x) {
  Layout s = norm_detail::layout_of(op, x);
  require_cuda(op, x);
  return s;
}

// A device pointer to an optional per-channel tensor, null when it is undefined.
template <typename T>
T* optional_ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

// From the channel sums of x and of (x - mean)^2: saved mean and inverse std, the affine
// coefficients a = gamma inv_std and b = beta, and the running-stat update (unbiased).
template <typename T>
__global__ void bn_train_channels_kernel(const double* mean, const double* sq_dev, const T* gamma,
                                         const T* beta, T* running_mean, T* running_var, T* saved_mean,
                                         T* saved_inv_std, double* a, double* b, int64_t c, double count,
                                         double momentum, double eps) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(blockDim.x) * gridDim.x) {
    const double inv_std = 1.0 / ::sqrt(sq_dev[ch] / count + eps);
    saved_mean[ch] = static_cast<T>(mean[ch]);
    saved_inv_std[ch] = static_cast<T>(inv_std);
    a[ch] = (gamma ? gamma[ch] : T(1)) * inv_std;
    b[ch] = beta ? beta[ch] : T(0);
    if (running_mean)
      running_mean[ch] = static_cast<T>((1 - momentum) * running_mean[ch] + momentum * mean[ch]);
    if (running_var)
      running_var[ch] =
          static_cast<T>((1 - momentum) * running_var[ch] + momentum * sq_dev[ch] / (count - 1));
  }
}

template <typename T>
__global__ void bn_eval_channels_kernel(const T* running_mean, const T* running_var, const T* gamma,
                                        const T* beta, double* center, double* a, double* b, int64_t c,
                                        double eps) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(blockDim.x) * gridDim.x) {
    const double inv_std = 1.0 / ::sqrt(static_cast<double>(running_var[ch]) + eps);
    center[ch] = running_mean[ch];
    a[ch] = (gamma ? gamma[ch] : T(1)) * inv_std;
    b[ch] = beta ? beta[ch] : T(0);
  }
}

// dx = g a + (x - mean) b + c per channel, with a = gamma inv_std, b = -a inv_std
// sum(g xhat) / count, c = -a sum(g) / count; also the gamma and beta gradients.
template <typename T>
__global__ void bn_backward_channels_kernel(const double* sum_g, const double* sum_g_centered,
                                            const T* inv_std, const T* gamma, T* grad_gamma, T* grad_beta,
                                            double* a, double* b, double* cc, int64_t c, double count) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c;
       ch += int64_t(blockDim.x) * gridDim.x) {
    const double is = inv_std[ch];
    const double sum_gx = sum_g_centered[ch] * is;
    const double scale = (gamma ? gamma[ch] : T(1)) * is;
    a[ch] = scale;
    b[ch] = -scale * is * sum_gx / count;
    cc[ch] = -scale * sum_g[ch] / count;
    grad_gamma[ch] = static_cast<T>(sum_gx);
    grad_beta[ch] = static_cast<T>(sum_g[ch]);
  }
}

template <typename T>
__global__ void bn_backward_input_kernel(const T* grad, const T* x, const T* mean, const double* a,
                                         const double* b, const double* cc, T* dx, int64_t count, int64_t c,
                                         int64_t inner) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count;
       idx += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ch = (idx / inner) % c;
    dx[idx] = grad[idx] * static_cast<T>(a[ch]) + (x[idx] - mean[ch]) * static_cast<T>(b[ch]) +
              static_cast<T>(cc[ch]);
  }
}

}  // namespace

Tensor batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                        Tensor& running_var, double momentum, double eps, BatchNormSaved& saved) {
  const char* op = "batch_norm";
  const Layout s = layout_of(op, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, beta, "beta", true);
  check_channel(op, x, running_mean, "running_mean", true);
  check_channel(op, x, running_var, "running_var", true);
  TANDEM_CHECK(s.count() > 1,
               op << ": training needs more than one value per channel, got input " << shape_str(x.shape()));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  saved.mean = Tensor::empty({s.c}, x.dtype(), x.device());
  saved.inv_std = Tensor::empty({s.c}, x.dtype(), x.device());
  if (s.c == 0) return y;
  // Rows: mean, sum of squared deviations, a, b (double).
  Tensor stats = Tensor::empty({4, s.c}, DType::f64, x.device());
  double* mean = mut_ptr<double>(stats);
  double* sq_dev = mean + s.c;
  double* a = mean + 2 * s.c;
  double* b = mean + 3 * s.c;
  const double count = static_cast<double>(s.count());
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* px = ptr<T>(x);
    channel_sums(x.device(), Plain<T>{px}, mean, s.n, s.c, s.inner, s.count());
    channel_sums(x.device(), CenteredSquare<T>{px, mean}, sq_dev, s.n, s.c, s.inner, int64_t{0});
    bn_train_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        mean, sq_dev, optional_ptr<const T>(gamma), optional_ptr<const T>(beta),
        optional_ptr<T>(running_mean), optional_ptr<T>(running_var), mut_ptr<T>(saved.mean),
        mut_ptr<T>(saved.inv_std), a, b, s.c, count, momentum, eps);
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (total == 0) return;
    affine_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(px, mean, a, b, mut_ptr<T>(y), total, s.c,
                                                                s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return y;
}

Tensor batch_norm_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                       const Tensor& running_var, double eps) {
  const char* op = "batch_norm";
  const Layout s = layout_of(op, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, beta, "beta", true);
  check_channel(op, x, running_mean, "running_mean", false);
  check_channel(op, x, running_var, "running_var", false);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  Tensor coefficients = Tensor::empty({3, s.c}, DType::f64, x.device());  // center, a, b
  double* center = mut_ptr<double>(coefficients);
  double* a = center + s.c;
  double* b = center + 2 * s.c;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    bn_eval_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        ptr<T>(running_mean), ptr<T>(running_var), optional_ptr<const T>(gamma), optional_ptr<const T>(beta),
        center, a, b, s.c, eps);
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    affine_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(ptr<T>(x), center, a, b, mut_ptr<T>(y), total,
                                                                s.c, s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& gamma,
                                   const BatchNormSaved& saved) {
  const char* op = "batch_norm_backward";
  const Layout s = layout_of(op, x);
  check_defined(op, grad, "gradient");
  check_same_shape(op, grad, x);
  norm_detail::check_compute_dtype(op, x, grad, "gradient");
  check_same_device(op, grad, x);
  check_channel(op, x, gamma, "gamma", true);
  check_channel(op, x, saved.mean, "saved mean", false);
  check_channel(op, x, saved.inv_std, "saved inv_std", false);
  BatchNormGrads out;
  out.x = Tensor::empty(x.shape(), x.dtype(), x.device());
  out.gamma = Tensor::empty({s.c}, x.dtype(), x.device());
  out.beta = Tensor::empty({s.c}, x.dtype(), x.device());
  if (s.c == 0) return out;
  // Rows: sum(g), sum(g (x - mean)), a, b, c (double).
  Tensor stats = Tensor::empty({5, s.c}, DType::f64, x.device());
  double* sum_g = mut_ptr<double>(stats);
  double* sum_g_centered = sum_g + s.c;
  double* a = sum_g + 2 * s.c;
  double* b = sum_g + 3 * s.c;
  double* cc = sum_g + 4 * s.c;
  set_device(x);
  dispatch_float(op, x.dtype(), [&]<typename T>() {
    const T* pg = ptr<T>(grad);
    const T* px = ptr<T>(x);
    const T* mean = ptr<T>(saved.mean);
    channel_sums(x.device(), Plain<T>{pg}, sum_g, s.n, s.c, s.inner, int64_t{0});
    channel_sums(x.device(), GradCentered<T>{pg, px, mean}, sum_g_centered, s.n, s.c, s.inner, int64_t{0});
    bn_backward_channels_kernel<<<blocks_for(s.c), kThreads, 0, stream()>>>(
        sum_g, sum_g_centered, ptr<T>(saved.inv_std), optional_ptr<const T>(gamma), mut_ptr<T>(out.gamma),
        mut_ptr<T>(out.beta), a, b, cc, s.c, static_cast<double>(s.count()));
    TANDEM_CHECK_LAUNCH();
    const int64_t total = x.numel();
    if (total == 0) return;
    bn_backward_input_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(
        pg, px, mean, a, b, cc, mut_ptr<T>(out.x), total, s.c, s.inner);
    TANDEM_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace tandem::kernels::cuda
