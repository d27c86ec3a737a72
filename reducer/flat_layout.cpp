#include "reducer/flat_layout.h"

#include "runtime/error.h"

namespace tandem {

namespace {

int64_t aligned(int64_t n) { return (n + FlatLayout::kAlign - 1) / FlatLayout::kAlign * FlatLayout::kAlign; }

}  // namespace

FlatLayout::FlatLayout(const std::vector<BucketParamInfo>& params) : params_(params) {
  std::vector<size_t> first_of_group;  // a parameter of each group
  for (size_t i = 0; i < params_.size(); ++i) {
    size_t g = 0;
    while (g < first_of_group.size() && !(params_[first_of_group[g]].dtype == params_[i].dtype &&
                                          params_[first_of_group[g]].device == params_[i].device)) {
      ++g;
    }
    if (g == first_of_group.size()) {
      first_of_group.push_back(i);
      capacity_.push_back(0);
    }
    group_of_.push_back(g);
    capacity_[g] += aligned(params_[i].count);
  }
}

std::vector<int64_t> FlatLayout::place(const std::vector<std::vector<size_t>>& buckets) const {
  // A bucket of elements [start, start + n) starts no later than the aligned counts of the
  // parameters before it, so the last one ends within capacity().
  std::vector<int64_t> next(capacity_.size(), 0), offsets;
  for (const std::vector<size_t>& bucket : buckets) {
    TANDEM_CHECK(!bucket.empty(), "internal: an empty bucket");
    const size_t g = group_of_[bucket.front()];
    offsets.push_back(next[g]);
    int64_t n = 0;
    for (size_t i : bucket) {
      TANDEM_CHECK(group_of_[i] == g, "internal: a bucket of parameters of different dtypes or devices");
      n += params_[i].count;
    }
    next[g] = aligned(next[g] + n);
    TANDEM_CHECK(next[g] <= capacity_[g], "internal: buckets beyond their flat storage");
  }
  return offsets;
}

}  // namespace tandem
