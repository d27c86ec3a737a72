// Bucket pack/unpack: one launch of the multi-tensor kernel (multi_tensor.cuh) copies every
// part, scaled, into or out of the flat bucket.
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cuda/bucket_ops_cuda.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace tandem::kernels::cuda {

namespace {

using namespace multi_tensor_detail;  // Slot, launch, and what the ops build on

// Slot pointers: source (null: zeros), destination. dst = scale * src.
template <typename T>
struct ScaledCopyOp {
  static constexpr int kUnroll = 1;
  static constexpr int64_t kChunk = 4096;
  T scale;

  template <int W, int U>
  __device__ __forceinline__ void operator()(const Slot& s, int64_t i, int64_t stride) const {
    T x[U][W];
    if (s.ptr[0] != nullptr) {
#pragma unroll
      for (int u = 0; u < U; ++u) load<W>(s.ptr[0], i + u * stride, x[u]);
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < W; ++k) x[u][k] = mul(scale, x[u][k]);
    } else {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int k = 0; k < W; ++k) x[u][k] = T(0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) store<W>(s.ptr[1], i + u * stride, x[u]);
  }
};

void scaled_copy(Device device, DType dtype, std::vector<Slot>& slots, double scale) {
  with_float_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    launch<T>(device, slots, ScaledCopyOp<T>{static_cast<T>(scale)});
  });
}

}  // namespace

void pack_(Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
           const std::vector<int64_t>& counts, double scale) {
  const size_t element = dtype_size(flat.dtype());
  char* base = static_cast<char*>(flat.raw_data());
  std::vector<Slot> slots;
  slots.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i)
    slots.push_back(make_slot(counts[i], parts[i].defined() ? parts[i].raw_data() : nullptr,
                              base + offsets[i] * static_cast<int64_t>(element)));
  scaled_copy(flat.device(), flat.dtype(), slots, scale);
}

void unpack_(const Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
             double scale) {
  const size_t element = dtype_size(flat.dtype());
  char* base = static_cast<char*>(flat.raw_data());
  std::vector<Slot> slots;
  slots.reserve(parts.size());
  for (size_t i = 0; i < parts.size(); ++i)
    slots.push_back(
        make_slot(parts[i].numel(), base + offsets[i] * static_cast<int64_t>(element), parts[i].raw_data()));
  scaled_copy(flat.device(), flat.dtype(), slots, scale);
}

}  // namespace tandem::kernels::cuda
