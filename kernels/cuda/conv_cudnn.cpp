// The cuDNN convolutions of conv_cudnn.h: a plan (descriptors, algorithm, workspace size)
// made once per shape, then one cuDNN call per convolution.
#include "kernels/cuda/conv_cudnn.h"

#if TANDEM_HAVE_CUDNN

#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/conv_algorithm.h"
#include "kernels/cuda/cudnn_check.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"

namespace tandem::kernels::cuda {

namespace {

using conv_detail::Geometry;

constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;
constexpr const char* kOffHint = " (TANDEM_CUDNN=off runs convolutions without cuDNN)";

// One handle per device, bound to the compute stream. cuDNN forbids two host threads using
// one handle at once, so each call holds the device's lock.
struct DeviceHandle {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
};

DeviceHandle& device_handle(int device) {
  static std::mutex mutex;
  // Never destroyed: a static destructor would run after the driver may have shut down.
  static auto* handles = new std::vector<std::unique_ptr<DeviceHandle>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(static_cast<size_t>(device) + 1);
  std::unique_ptr<DeviceHandle>& slot = (*handles)[static_cast<size_t>(device)];
  if (!slot) {
    auto made = std::make_unique<DeviceHandle>();
    TANDEM_CHECK_CUDA(cudaSetDevice(device));
    TANDEM_CHECK_CUDNN(cudnnCreate(&made->handle),
                       "creating the cuDNN handle of cuda:" << device << kOffHint);
    TANDEM_CHECK_CUDNN(cudnnSetStream(made->handle, tandem::cuda::compute_stream()),
                       "binding the cuDNN handle of cuda:" << device << " to the compute stream");
    slot = std::move(made);
  }
  return *slot;
}

// The four descriptors of one conv2d geometry: x [n, c, h, w], w [o, c / groups, kh, kw],
// the convolution (cross-correlation, as conv2d is, with its dilation and group count),
// y [n, o, ho, wo].
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  Descriptors() = default;
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
  // Unchecked: a destructor may not throw, and a failed destroy leaks a small host struct.
  ~Descriptors() {
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
  }
};

struct Plan {
  bool use_cudnn = false;  // false: cuDNN refused this key; run im2col + cuBLAS
  int algo = 0;            // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  size_t workspace_bytes = 0;
  std::shared_ptr<Descriptors> desc;
};

ConvPlanCache<Plan>& plans() {
  static auto* cache = new ConvPlanCache<Plan>();  // never destroyed, like the handles
  return *cache;
}

// Statuses that mean "cuDNN does not do this" (the caller falls back) rather than a failure.
bool refused(cudnnStatus_t rc) {
#if CUDNN_MAJOR >= 9
  const int category = static_cast<int>(rc) / 1000;
  return category == 2 || category == 3;  // CUDNN_STATUS_BAD_PARAM*, CUDNN_STATUS_NOT_SUPPORTED*
#else
  return rc == CUDNN_STATUS_BAD_PARAM || rc == CUDNN_STATUS_NOT_SUPPORTED;
#endif
}

bool fits_int(int64_t v) { return v >= 1 && v <= INT_MAX; }

// What cuDNN takes: float32 or float64, no empty dimension, every tensor's elements
// addressable by int.
bool supported(DType dtype, const Geometry& g) {
  if (dtype != DType::f32 && dtype != DType::f64) return false;
  for (int64_t v : {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.ho, g.wo, g.stride, g.dilation, g.groups})
    if (!fits_int(v)) return false;
  if (g.padding < 0 || g.padding > INT_MAX) return false;
  return fits_int(g.n * g.c * g.h * g.w) && fits_int(g.n * g.o * g.ho * g.wo) &&
         fits_int(g.o * g.cg() * g.kh * g.kw);
}

// nullptr when cuDNN refuses the geometry.
std::shared_ptr<Descriptors> make_descriptors(const ConvPlanKey& key, const Geometry& g) {
  const cudnnDataType_t type = key.dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  auto d = std::make_shared<Descriptors>();
  const std::string what = key.str();
  TANDEM_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d->x), what);
  TANDEM_CHECK_CUDNN(cudnnCreateTensorDescriptor(&d->y), what);
  TANDEM_CHECK_CUDNN(cudnnCreateFilterDescriptor(&d->w), what);
  TANDEM_CHECK_CUDNN(cudnnCreateConvolutionDescriptor(&d->conv), what);
  auto i = [](int64_t v) { return static_cast<int>(v); };
  const cudnnStatus_t statuses[] = {
      cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.c), i(g.h), i(g.w)),
      cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, type, i(g.n), i(g.o), i(g.ho), i(g.wo)),
      cudnnSetFilter4dDescriptor(d->w, type, CUDNN_TENSOR_NCHW, i(g.o), i(g.cg()), i(g.kh), i(g.kw)),
      cudnnSetConvolution2dDescriptor(d->conv, i(g.padding), i(g.padding), i(g.stride), i(g.stride),
                                      i(g.dilation), i(g.dilation), CUDNN_CROSS_CORRELATION, type),
      cudnnSetConvolutionGroupCount(d->conv, i(g.groups)),
      // FMA math: on GPUs with tensor cores the default math type lets float32 run as TF32,
      // whose 10-bit mantissa would part the results from the CPU twin's.
      cudnnSetConvolutionMathType(d->conv, CUDNN_FMA_MATH)};
  for (cudnnStatus_t rc : statuses) {
    if (refused(rc)) return nullptr;
    TANDEM_CHECK_CUDNN(rc, what);
  }
  return d;
}

// Scratch memory from the caching allocator: returned to the cache when the Tensor goes,
// and safe to reuse at once since later work queues behind this call on the same stream.
Tensor workspace(size_t bytes, int device) {
  return Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, Device::cuda(device));
}

// The first of cuDNN's ranked results that is usable here: found, deterministic (the same
// result every run), without tensor cores, within the workspace limit.
template <typename Perf>
bool acceptable(const Perf& perf) {
  return perf.status == CUDNN_STATUS_SUCCESS && perf.determinism == CUDNN_DETERMINISTIC &&
         (perf.mathType == CUDNN_FMA_MATH || perf.mathType == CUDNN_DEFAULT_MATH) &&
         perf.memory <= kMaxWorkspaceBytes;
}

// Ranks the algorithms (heuristics, or timing them in benchmark mode with a workspace as
// large as the limit allows) and keeps the first acceptable one whose workspace size cuDNN
// confirms. `rank(count, returned, results, workspace, bytes)` calls the heuristic (null
// workspace) or the timing function; `workspace_size(algo, bytes)` the size query.
template <typename Perf, typename Rank, typename WorkspaceSize>
Plan choose(const ConvPlanKey& key, std::shared_ptr<Descriptors> desc, int algo_count, Rank&& rank,
            WorkspaceSize&& workspace_size) {
  std::vector<Perf> results(static_cast<size_t>(algo_count));
  int returned = 0;
  cudnnStatus_t rc;
  if (key.mode == ConvAlgorithmMode::benchmark) {
    size_t free_bytes = 0, total_bytes = 0;
    TANDEM_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t bytes = std::min(kMaxWorkspaceBytes, free_bytes / 2);
    Tensor scratch = workspace(bytes, key.device);
    rc = rank(algo_count, &returned, results.data(), scratch.raw_data(), bytes);
  } else {
    rc = rank(algo_count, &returned, results.data(), nullptr, 0);
  }
  if (refused(rc)) return Plan{};
  TANDEM_CHECK_CUDNN(rc, "ranking the algorithms of " << key.str());
  for (int i = 0; i < returned; ++i) {
    const Perf& perf = results[static_cast<size_t>(i)];
    if (!acceptable(perf)) continue;
    size_t bytes = 0;
    if (workspace_size(perf.algo, &bytes) != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspaceBytes) continue;
    return Plan{true, static_cast<int>(perf.algo), bytes, desc};
  }
  return Plan{};
}

ConvPlanKey key_of(ConvPass pass, const Tensor& t, const Geometry& g, ConvAlgorithmMode mode) {
  ConvPlanKey key{.pass = pass, .n = g.n, .c = g.c, .h = g.h, .w = g.w, .o = g.o, .kh = g.kh, .kw = g.kw};
  key.stride = g.stride, key.padding = g.padding, key.dilation = g.dilation, key.groups = g.groups;
  key.ho = g.ho, key.wo = g.wo;
  key.dtype = t.dtype(), key.device = t.device().index, key.mode = mode;
  return key;
}

// alpha = 1, beta = 0 in the data's type (cuDNN reads double scalars for double data).
struct Scaling {
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
  const void* one(DType dtype) const {
    return dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one_f;
  }
  const void* zero(DType dtype) const {
    return dtype == DType::f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  }
};

// The plan for this call, made on first use; nullptr when cuDNN is off or refuses. The
// caller holds the device's lock.
template <typename Choose>
const Plan* plan_for(ConvPass pass, const Tensor& t, const Geometry& g, ConvAlgorithmMode mode,
                     Choose&& choose_fn) {
  const ConvPlanKey key = key_of(pass, t, g, mode);
  const Plan& plan = plans().get_or_make(key, [&]() -> Plan {
    std::shared_ptr<Descriptors> desc = make_descriptors(key, g);
    if (!desc) return Plan{};
    return choose_fn(key, desc);
  });
  return plan.use_cudnn ? &plan : nullptr;
}

}  // namespace

bool cudnn_conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y, const Geometry& g) {
  const ConvAlgorithmMode mode = conv_algorithm_mode();
  if (mode == ConvAlgorithmMode::off || !supported(x.dtype(), g)) return false;
  DeviceHandle& dh = device_handle(x.device().index);
  std::lock_guard<std::mutex> lock(dh.mutex);
  const Plan* plan = plan_for(ConvPass::forward, x, g, mode, [&](const ConvPlanKey& key, auto desc) {
    return choose<cudnnConvolutionFwdAlgoPerf_t>(
        key, desc, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
        [&](int count, int* returned, cudnnConvolutionFwdAlgoPerf_t* results, void* ws, size_t bytes) {
          if (key.mode == ConvAlgorithmMode::benchmark)
            return cudnnFindConvolutionForwardAlgorithmEx(dh.handle, desc->x, x.raw_data(), desc->w,
                                                          weight.raw_data(), desc->conv, desc->y,
                                                          y.raw_data(), count, returned, results, ws, bytes);
          return cudnnGetConvolutionForwardAlgorithm_v7(dh.handle, desc->x, desc->w, desc->conv, desc->y,
                                                        count, returned, results);
        },
        [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(dh.handle, desc->x, desc->w, desc->conv, desc->y,
                                                         algo, bytes);
        });
  });
  if (plan == nullptr) return false;
  Tensor scratch = workspace(plan->workspace_bytes, x.device().index);
  const Scaling s;
  TANDEM_CHECK_CUDNN(
      cudnnConvolutionForward(dh.handle, s.one(x.dtype()), plan->desc->x, x.raw_data(), plan->desc->w,
                              weight.raw_data(), plan->desc->conv,
                              static_cast<cudnnConvolutionFwdAlgo_t>(plan->algo), scratch.raw_data(),
                              plan->workspace_bytes, s.zero(x.dtype()), plan->desc->y, y.raw_data()),
      op << ": " << key_of(ConvPass::forward, x, g, mode).str() << kOffHint);
  return true;
}

bool cudnn_conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                               const Geometry& g) {
  const ConvAlgorithmMode mode = conv_algorithm_mode();
  if (mode == ConvAlgorithmMode::off || !supported(grad.dtype(), g)) return false;
  DeviceHandle& dh = device_handle(grad.device().index);
  std::lock_guard<std::mutex> lock(dh.mutex);
  const Plan* plan = plan_for(ConvPass::backward_data, grad, g, mode, [&](const ConvPlanKey& key, auto desc) {
    return choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        key, desc, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
        [&](int count, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results, void* ws, size_t bytes) {
          if (key.mode == ConvAlgorithmMode::benchmark)
            return cudnnFindConvolutionBackwardDataAlgorithmEx(
                dh.handle, desc->w, weight.raw_data(), desc->y, grad.raw_data(), desc->conv, desc->x,
                dx.raw_data(), count, returned, results, ws, bytes);
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(dh.handle, desc->w, desc->y, desc->conv, desc->x,
                                                             count, returned, results);
        },
        [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(dh.handle, desc->w, desc->y, desc->conv,
                                                              desc->x, algo, bytes);
        });
  });
  if (plan == nullptr) return false;
  Tensor scratch = workspace(plan->workspace_bytes, grad.device().index);
  const Scaling s;
  TANDEM_CHECK_CUDNN(
      cudnnConvolutionBackwardData(dh.handle, s.one(grad.dtype()), plan->desc->w, weight.raw_data(),
                                   plan->desc->y, grad.raw_data(), plan->desc->conv,
                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(plan->algo), scratch.raw_data(),
                                   plan->workspace_bytes, s.zero(grad.dtype()), plan->desc->x, dx.raw_data()),
      op << ": " << key_of(ConvPass::backward_data, grad, g, mode).str() << kOffHint);
  return true;
}

bool cudnn_conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                                const Geometry& g) {
  const ConvAlgorithmMode mode = conv_algorithm_mode();
  if (mode == ConvAlgorithmMode::off || !supported(x.dtype(), g)) return false;
  DeviceHandle& dh = device_handle(x.device().index);
  std::lock_guard<std::mutex> lock(dh.mutex);
  const Plan* plan = plan_for(ConvPass::backward_filter, x, g, mode, [&](const ConvPlanKey& key, auto desc) {
    return choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
        key, desc, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        [&](int count, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results, void* ws, size_t bytes) {
          if (key.mode == ConvAlgorithmMode::benchmark)
            return cudnnFindConvolutionBackwardFilterAlgorithmEx(
                dh.handle, desc->x, x.raw_data(), desc->y, grad.raw_data(), desc->conv, desc->w,
                dweight.raw_data(), count, returned, results, ws, bytes);
          return cudnnGetConvolutionBackwardFilterAlgorithm_v7(dh.handle, desc->x, desc->y, desc->conv,
                                                               desc->w, count, returned, results);
        },
        [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(dh.handle, desc->x, desc->y, desc->conv,
                                                                desc->w, algo, bytes);
        });
  });
  if (plan == nullptr) return false;
  Tensor scratch = workspace(plan->workspace_bytes, x.device().index);
  const Scaling s;
  TANDEM_CHECK_CUDNN(cudnnConvolutionBackwardFilter(dh.handle, s.one(x.dtype()), plan->desc->x, x.raw_data(),
                                                    plan->desc->y, grad.raw_data(), plan->desc->conv,
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(plan->algo),
                                                    scratch.raw_data(), plan->workspace_bytes,
                                                    s.zero(x.dtype()), plan->desc->w, dweight.raw_data()),
                     op << ": " << key_of(ConvPass::backward_filter, x, g, mode).str() << kOffHint);
  return true;
}

}  // namespace tandem::kernels::cuda

#else  // cuDNN is not in this build: every convolution runs im2col + cuBLAS.

namespace tandem::kernels::cuda {

bool cudnn_conv_forward(const char*, const Tensor&, const Tensor&, Tensor&, const conv_detail::Geometry&) {
  return false;
}
bool cudnn_conv_backward_input(const char*, const Tensor&, const Tensor&, Tensor&,
                               const conv_detail::Geometry&) {
  return false;
}
bool cudnn_conv_backward_weight(const char*, const Tensor&, const Tensor&, Tensor&,
                                const conv_detail::Geometry&) {
  return false;
}

}  // namespace tandem::kernels::cuda

#endif
