// The convolution algorithm mode (TANDEM_CUDNN) and the plan cache's key.
#include "kernels/conv_algorithm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "runtime/error.h"

namespace tandem::kernels {

namespace {

constexpr int kUnset = -1;
std::atomic<int> g_mode{kUnset};

}  // namespace

ConvAlgorithmMode parse_conv_algorithm_mode(std::string_view text, const std::string& what) {
  for (ConvAlgorithmMode mode : {ConvAlgorithmMode::off, ConvAlgorithmMode::on, ConvAlgorithmMode::benchmark})
    if (text == conv_algorithm_mode_name(mode)) return mode;
  TANDEM_FAIL(what << "='" << text << "' is not a convolution algorithm mode (use off, on or benchmark)");
}

const char* conv_algorithm_mode_name(ConvAlgorithmMode mode) {
  switch (mode) {
    case ConvAlgorithmMode::off:
      return "off";
    case ConvAlgorithmMode::on:
      return "on";
    case ConvAlgorithmMode::benchmark:
      return "benchmark";
  }
  return "?";
}

ConvAlgorithmMode conv_algorithm_mode() {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode != kUnset) return static_cast<ConvAlgorithmMode>(mode);
  const char* env = std::getenv("TANDEM_CUDNN");
  ConvAlgorithmMode parsed =
      env == nullptr || *env == '\0' ? ConvAlgorithmMode::on : parse_conv_algorithm_mode(env, "TANDEM_CUDNN");
  // A concurrent set_conv_algorithm_mode wins over the environment.
  int expected = kUnset;
  g_mode.compare_exchange_strong(expected, static_cast<int>(parsed), std::memory_order_relaxed);
  return static_cast<ConvAlgorithmMode>(g_mode.load(std::memory_order_relaxed));
}

void set_conv_algorithm_mode(ConvAlgorithmMode mode) {
  g_mode.store(static_cast<int>(mode), std::memory_order_relaxed);
}

void reset_conv_algorithm_mode() { g_mode.store(kUnset, std::memory_order_relaxed); }

bool cudnn_built() {
#if TANDEM_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<uint64_t> g_cudnn_calls{0}, g_im2col_calls{0};
}  // namespace

ConvDispatchCounts conv_dispatch_counts() {
  return {g_cudnn_calls.load(std::memory_order_relaxed), g_im2col_calls.load(std::memory_order_relaxed)};
}

void count_conv_dispatch(bool by_cudnn) {
  (by_cudnn ? g_cudnn_calls : g_im2col_calls).fetch_add(1, std::memory_order_relaxed);
}

const char* conv_pass_name(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return "forward";
    case ConvPass::backward_data:
      return "backward data";
    case ConvPass::backward_filter:
      return "backward filter";
  }
  return "?";
}

std::string ConvPlanKey::str() const {
  std::ostringstream os;
  os << conv_pass_name(pass) << " of conv2d x [" << n << ", " << c << ", " << h << ", " << w << "] weight ["
     << o << ", " << c / std::max<int64_t>(groups, 1) << ", " << kh << ", " << kw << "] stride " << stride
     << " padding " << padding;
  if (dilation != 1) os << " dilation " << dilation;
  if (groups != 1) os << " groups " << groups;
  os << " " << dtype_name(dtype) << " on cuda:" << device << " (" << conv_algorithm_mode_name(mode) << ")";
  return os.str();
}

size_t ConvPlanKeyHash::operator()(const ConvPlanKey& key) const {
  size_t h = 0;
  auto mix = [&h](int64_t v) { h ^= std::hash<int64_t>{}(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  for (int64_t v :
       {static_cast<int64_t>(key.pass), key.n, key.c, key.h, key.w, key.o, key.kh, key.kw, key.stride,
        key.padding, key.dilation, key.groups, key.ho, key.wo, static_cast<int64_t>(key.dtype),
        static_cast<int64_t>(key.device), static_cast<int64_t>(key.mode)})
    mix(v);
  return h;
}

}  // namespace tandem::kernels
