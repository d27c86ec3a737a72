#include "reducer/bucket_assignment.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "runtime/error.h"

namespace tandem {

std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketParamInfo>& params,
                                                const std::vector<size_t>& order, const BucketCaps& caps) {
  struct Open {
    std::vector<size_t> indices;
    size_t bytes = 0;
    bool first = true;  // the group's first bucket uses the small cap
  };
  // Keyed by (dtype, device kind, device index): one open bucket per group.
  std::map<std::tuple<int, int, int>, Open> open;
  std::vector<std::vector<size_t>> buckets;
  std::vector<bool> seen(params.size(), false);
  for (size_t index : order) {
    TANDEM_CHECK(index < params.size(),
                 "assign_buckets: index " << index << " out of range of " << params.size() << " parameters");
    TANDEM_CHECK(!seen[index], "assign_buckets: parameter " << index << " appears twice in the order");
    seen[index] = true;
    const BucketParamInfo& p = params[index];
    auto key = std::make_tuple(static_cast<int>(p.dtype), static_cast<int>(p.device.kind), p.device.index);
    Open& b = open[key];
    b.indices.push_back(index);
    b.bytes += static_cast<size_t>(p.count) * dtype_size(p.dtype);
    size_t cap = b.first ? caps.first_bucket_bytes : caps.bucket_bytes;
    if (b.bytes >= cap) {
      buckets.push_back(std::move(b.indices));
      b = Open{{}, 0, false};
    }
  }
  for (auto& [key, b] : open) {
    if (!b.indices.empty()) buckets.push_back(std::move(b.indices));
  }
  // Order buckets by where their first parameter sits in `order`.
  std::vector<size_t> position(params.size(), 0);
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const auto& a, const auto& b) { return position[a.front()] < position[b.front()]; });
  return buckets;
}

}  // namespace tandem
