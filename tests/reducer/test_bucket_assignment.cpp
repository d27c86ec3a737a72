#include <catch2/catch.hpp>

#include "reducer/bucket_assignment.h"

using namespace tandem;

namespace {
std::vector<size_t> reversed(size_t n) {
  std::vector<size_t> order;
  for (size_t i = n; i-- > 0;) order.push_back(i);
  return order;
}
}  // namespace

TEST_CASE("buckets fill in the given order up to the cap, first bucket smaller", "[buckets]") {
  // 6 float32 parameters of 100 elements (400 bytes each); first cap 500 B, then 1000 B.
  std::vector<BucketParamInfo> params(6, BucketParamInfo{100, DType::f32, Device::cpu()});
  BucketCaps caps{500, 1000};
  auto buckets = assign_buckets(params, reversed(6), caps);
  // First bucket closes once it reaches 500 B: params 5, 4 (800 B). Then 1000 B: 3, 2, 1 (1200 B). Then 0.
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0] == std::vector<size_t>{5, 4});
  CHECK(buckets[1] == std::vector<size_t>{3, 2, 1});
  CHECK(buckets[2] == std::vector<size_t>{0});
}

TEST_CASE("a parameter larger than the cap is never split", "[buckets]") {
  std::vector<BucketParamInfo> params = {
      {10, DType::f32, {}}, {1000000, DType::f32, {}}, {10, DType::f32, {}}};
  auto buckets = assign_buckets(params, reversed(3), BucketCaps{64, 64});
  REQUIRE(buckets.size() == 2);
  CHECK(buckets[0] == std::vector<size_t>{2, 1});  // 40 B < 64, then the big one closes it
  CHECK(buckets[1] == std::vector<size_t>{0});
}

TEST_CASE("buckets never mix dtypes or devices, and are ordered by first parameter", "[buckets]") {
  std::vector<BucketParamInfo> params = {{10, DType::f32, Device::cpu()},
                                         {10, DType::f64, Device::cpu()},
                                         {10, DType::f32, Device::cpu()},
                                         {10, DType::f32, Device::cuda(0)},
                                         {10, DType::f64, Device::cpu()}};
  auto buckets = assign_buckets(params, reversed(5), BucketCaps{1 << 20, 1 << 20});
  REQUIRE(buckets.size() == 3);
  CHECK(buckets[0] == std::vector<size_t>{4, 1});  // f64 cpu: first seen at position 0
  CHECK(buckets[1] == std::vector<size_t>{3});     // f32 cuda
  CHECK(buckets[2] == std::vector<size_t>{2, 0});  // f32 cpu
  // Deterministic: the same input gives the same answer.
  CHECK(assign_buckets(params, reversed(5), BucketCaps{1 << 20, 1 << 20}) == buckets);
}

TEST_CASE("a subset order (a phase) only buckets the parameters it lists", "[buckets]") {
  std::vector<BucketParamInfo> params(5, BucketParamInfo{100, DType::f32, Device::cpu()});
  auto buckets = assign_buckets(params, {4, 2}, BucketCaps{1 << 20, 1 << 20});
  REQUIRE(buckets.size() == 1);
  CHECK(buckets[0] == std::vector<size_t>{4, 2});
  CHECK_THROWS_WITH(assign_buckets(params, {4, 4}, BucketCaps{}), Catch::Contains("appears twice"));
}
