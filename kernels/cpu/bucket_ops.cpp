// Bucket pack/unpack on the CPU: the twins of the CUDA kernels in kernels/cuda/bucket_ops.cu.
#include "kernels/bucket_ops.h"

#include <algorithm>
#include <numeric>

#include "kernels/dispatch.h"

#if TANDEM_HAVE_CUDA
#include "kernels/cuda/bucket_ops_cuda.h"
#endif

namespace tandem::kernels {

namespace {

std::string part_str(const Tensor& t) { return t.defined() ? t.str() : std::string("(undefined)"); }

// The slot checks of both ops; `counts` is null for unpack_ (the parts give the counts).
void check_slots(const char* op, const Tensor& flat, const std::vector<Tensor>& parts,
                 const std::vector<int64_t>& offsets, const std::vector<int64_t>* counts) {
  check_defined(op, flat, "flat buffer");
  TANDEM_CHECK(flat.dtype() == DType::f32 || flat.dtype() == DType::f64,
               op << ": flat buffer " << flat.str() << " must be float32 or float64");
  TANDEM_CHECK(offsets.size() == parts.size(),
               op << ": " << parts.size() << " parts but " << offsets.size() << " offsets");
  if (counts != nullptr) {
    TANDEM_CHECK(counts->size() == parts.size(),
                 op << ": " << parts.size() << " parts but " << counts->size() << " counts");
  }
  std::vector<int64_t> slot_counts(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& part = parts[i];
    if (part.defined()) {
      TANDEM_CHECK(part.dtype() == flat.dtype() && part.device() == flat.device(),
                   op << ": part #" << i << " " << part.str()
                      << " differs in dtype or device from flat buffer " << flat.str());
      TANDEM_CHECK(counts == nullptr || (*counts)[i] == part.numel(),
                   op << ": part #" << i << " " << part.str() << " has " << part.numel()
                      << " elements but its count is " << (*counts)[i]);
    } else {
      TANDEM_CHECK(counts != nullptr, op << ": part #" << i << " is an undefined tensor");
    }
    const int64_t count = counts != nullptr ? (*counts)[i] : part.numel();
    TANDEM_CHECK(count >= 0 && offsets[i] >= 0 && offsets[i] + count <= flat.numel(),
                 op << ": part #" << i << " " << part_str(part) << " at offset " << offsets[i] << " ("
                    << count << " elements) does not fit flat buffer " << flat.str());
    slot_counts[i] = count;
  }
  std::vector<size_t> order(parts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Buckets list their parts in slot order; sort only when they do not.
  if (!std::is_sorted(offsets.begin(), offsets.end()))
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  size_t prev = parts.size();  // the last non-empty slot seen
  for (size_t i : order) {
    if (slot_counts[i] == 0) continue;
    if (prev != parts.size()) {
      TANDEM_CHECK(offsets[prev] + slot_counts[prev] <= offsets[i],
                   op << ": the slots of part #" << prev << " " << part_str(parts[prev]) << " at offset "
                      << offsets[prev] << " and part #" << i << " " << part_str(parts[i]) << " at offset "
                      << offsets[i] << " overlap");
    }
    prev = i;
  }
}

}  // namespace

void pack_(Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
           const std::vector<int64_t>& counts, double scale) {
  const char* op = "pack_";
  check_slots(op, flat, parts, offsets, &counts);
  TANDEM_CUDA_ROUTE(flat, cuda::pack_(flat, parts, offsets, counts, scale));
  require_cpu(op, flat);
  dispatch_float(op, flat.dtype(), [&]<typename T>() {
    const T s = static_cast<T>(scale);
    T* base = flat.data<T>();
    for (size_t i = 0; i < parts.size(); ++i) {
      T* dst = base + offsets[i];
      if (!parts[i].defined()) {
        std::fill(dst, dst + counts[i], T(0));
        continue;
      }
      const T* src = parts[i].data<T>();
      for (int64_t j = 0; j < counts[i]; ++j) dst[j] = s * src[j];
    }
  });
}

void unpack_(const Tensor& flat, const std::vector<Tensor>& parts, const std::vector<int64_t>& offsets,
             double scale) {
  const char* op = "unpack_";
  check_slots(op, flat, parts, offsets, nullptr);
  TANDEM_CUDA_ROUTE(flat, cuda::unpack_(flat, parts, offsets, scale));
  require_cpu(op, flat);
  dispatch_float(op, flat.dtype(), [&]<typename T>() {
    const T s = static_cast<T>(scale);
    const T* base = flat.data<T>();
    for (size_t i = 0; i < parts.size(); ++i) {
      const T* src = base + offsets[i];
      T* dst = parts[i].data<T>();
      for (int64_t j = 0; j < parts[i].numel(); ++j) dst[j] = s * src[j];
    }
  });
}

}  // namespace tandem::kernels
