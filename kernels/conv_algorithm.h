// How convolutions on a GPU choose their kernels, and the cache that makes each choice once.
//
// Contract:
// - ConvAlgorithmMode: `on` (the default) runs CUDA convolutions through cuDNN with the
//   algorithm its heuristics rank first for the shape; `benchmark` times cuDNN's algorithms
//   on the first call of each shape and keeps the fastest; `off` always runs im2col +
//   cuBLAS (kernels/cuda/conv.cu). Without cuDNN in the build (cudnn_built() false), or for
//   a shape or dtype cuDNN refuses, every mode runs im2col + cuBLAS. CPU tensors ignore it.
// - conv_algorithm_mode(): the mode in force. Until set_conv_algorithm_mode is called it is
//   read from the environment variable TANDEM_CUDNN (off | on | benchmark; unset or empty:
//   on) at the first call; any other value throws an Error naming TANDEM_CUDNN, the value and
//   the accepted ones, and so does every later call until the variable or the mode is set.
//   reset_conv_algorithm_mode() forgets a set mode: the next call reads TANDEM_CUDNN again.
// - parse_conv_algorithm_mode(text, what): the mode `text` names; else an Error naming `what`
//   (a flag, a variable), the text and the accepted values.
// - conv_dispatch_counts(): how many CUDA convolution calls (of the three kernels) ran on
//   cuDNN and how many on im2col + cuBLAS since the process started; count_conv_dispatch is
//   the CUDA kernels' side of it.
// - ConvPlanKey: everything a cached choice depends on: the pass (the cuDNN call: forward,
//   backward data or backward filter of a conv2d geometry; a transposed convolution is one
//   of these with the roles swapped), the conv2d geometry (input, weight, stride, padding,
//   dilation, groups),
//   the dtype, the device and the mode that chose it (switching modes chooses again).
//   str() prints it for errors; equal keys hash equally.
// - ConvPlanCache<Plan>: a thread-safe map from key to plan; get_or_make(key, make) calls
//   make() only for a key it does not hold (a make() that throws stores nothing), and the
//   reference it returns stays valid for the cache's life.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/dtype.h"

namespace tandem::kernels {

enum class ConvAlgorithmMode { off, on, benchmark };

ConvAlgorithmMode conv_algorithm_mode();
void set_conv_algorithm_mode(ConvAlgorithmMode mode);
void reset_conv_algorithm_mode();
ConvAlgorithmMode parse_conv_algorithm_mode(std::string_view text, const std::string& what);
const char* conv_algorithm_mode_name(ConvAlgorithmMode mode);
bool cudnn_built();

struct ConvDispatchCounts {
  uint64_t cudnn = 0;
  uint64_t im2col = 0;
};
ConvDispatchCounts conv_dispatch_counts();
void count_conv_dispatch(bool by_cudnn);

enum class ConvPass { forward, backward_data, backward_filter };
const char* conv_pass_name(ConvPass pass);

struct ConvPlanKey {
  ConvPass pass = ConvPass::forward;
  int64_t n = 0, c = 0, h = 0, w = 0;  // input [n, c, h, w]
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, c / groups, kh, kw]
  int64_t stride = 1, padding = 0;
  int64_t dilation = 1, groups = 1;
  // The output [n, o, ho, wo]: not implied by the rest for a transposed convolution's
  // geometry, whose output_padding may reach the stride when the dilation exceeds it.
  int64_t ho = 0, wo = 0;
  DType dtype = DType::f32;
  int device = 0;
  ConvAlgorithmMode mode = ConvAlgorithmMode::on;

  bool operator==(const ConvPlanKey&) const = default;
  std::string str() const;
};

struct ConvPlanKeyHash {
  size_t operator()(const ConvPlanKey& key) const;
};

template <typename Plan>
class ConvPlanCache {
 public:
  template <typename Make>
  const Plan& get_or_make(const ConvPlanKey& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, make()).first;
    return it->second;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return plans_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<ConvPlanKey, Plan, ConvPlanKeyHash> plans_;
};

}  // namespace tandem::kernels
