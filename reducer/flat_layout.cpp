#include "reducer/flat_layout.h"

#include <algorithm>

#include "runtime/error.h"

namespace tandem {

namespace {

int64_t aligned(int64_t n) { return (n + FlatLayout::kAlign - 1) / FlatLayout::kAlign * FlatLayout::kAlign; }

constexpr size_t kMixed = static_cast<size_t>(-1);

}  // namespace

FlatLayout::FlatLayout(const std::vector<BucketParamInfo>& params, const std::vector<size_t>& region_of)
    : params_(params), region_of_(region_of) {
  if (region_of_.empty()) region_of_.assign(params_.size(), 0);
  TANDEM_CHECK(region_of_.size() == params_.size(),
               "internal: " << region_of_.size() << " regions for " << params_.size() << " parameters");
  const size_t regions = params_.empty() ? 0 : *std::max_element(region_of_.begin(), region_of_.end()) + 1;
  std::vector<size_t> first_of_group;  // a parameter of each group
  std::vector<std::vector<int64_t>> region_size;
  for (size_t i = 0; i < params_.size(); ++i) {
    size_t g = 0;
    while (g < first_of_group.size() && !(params_[first_of_group[g]].dtype == params_[i].dtype &&
                                          params_[first_of_group[g]].device == params_[i].device)) {
      ++g;
    }
    if (g == first_of_group.size()) {
      first_of_group.push_back(i);
      capacity_.push_back(0);
      region_size.emplace_back(regions, 0);
    }
    group_of_.push_back(g);
    capacity_[g] += aligned(params_[i].count);
    region_size[g][region_of_[i]] += aligned(params_[i].count);
  }
  for (const std::vector<int64_t>& sizes : region_size) {
    std::vector<int64_t>& starts = region_start_.emplace_back();
    int64_t start = 0;
    for (int64_t size : sizes) {
      starts.push_back(start);
      start += size;
    }
  }
}

std::vector<int64_t> FlatLayout::place(const std::vector<std::vector<size_t>>& buckets) const {
  // The region of each group's buckets, or kMixed.
  std::vector<size_t> region(capacity_.size(), kMixed - 1);  // kMixed - 1: none seen yet
  for (const std::vector<size_t>& bucket : buckets) {
    TANDEM_CHECK(!bucket.empty(), "internal: an empty bucket");
    for (size_t i : bucket) {
      size_t& r = region[group_of_[i]];
      r = r == kMixed - 1 || r == region_of_[i] ? region_of_[i] : kMixed;
    }
  }
  // A bucket of elements [start, start + n) starts no later than the aligned counts of the
  // parameters (of its region) before it, so the last one ends within the region.
  std::vector<int64_t> next(capacity_.size()), end(capacity_.size()), offsets;
  for (size_t g = 0; g < capacity_.size(); ++g) {
    const bool one = region[g] < region_start_[g].size();
    next[g] = one ? region_start_[g][region[g]] : 0;
    end[g] = one && region[g] + 1 < region_start_[g].size() ? region_start_[g][region[g] + 1] : capacity_[g];
  }
  for (const std::vector<size_t>& bucket : buckets) {
    const size_t g = group_of_[bucket.front()];
    offsets.push_back(next[g]);
    int64_t n = 0;
    for (size_t i : bucket) {
      TANDEM_CHECK(group_of_[i] == g, "internal: a bucket of parameters of different dtypes or devices");
      n += params_[i].count;
    }
    next[g] = aligned(next[g] + n);
    TANDEM_CHECK(next[g] <= end[g], "internal: buckets beyond their region of the flat storage");
  }
  return offsets;
}

}  // namespace tandem
