// SharedBuffers at 2-4 ranks: the reduce-scatter and slices, and the whole-range sums, give
// the exact sum in float32 and int64 use after use; the slices partition the buffer; a rank
// that never publishes makes the others fail by its name within the group's timeout.
// Value checks use CHECK, never REQUIRE, so every rank keeps issuing the same collectives.
#include <catch2/catch.hpp>
#include <chrono>
#include <string>

#include "runtime/dist/mpi_process_group.h"
#include "runtime/dist/shared_buffers.h"

using namespace tandem;
using namespace tandem::dist;

namespace {

std::shared_ptr<ProcessGroup> world() {
  static std::shared_ptr<ProcessGroup> group = [] {
    auto g = init_process_group(Backend::mpi);
    g->set_timeout(std::chrono::seconds(30));
    return g;
  }();
  return group;
}

// Rank r's element i at use e: small integers, so every float32 sum is exact.
double value(int rank, int64_t i, uint64_t epoch) { return (rank + 1) * static_cast<double>(i % 97) + epoch; }

double sum_over_ranks(int size, int64_t i, uint64_t epoch) {
  double total = 0;
  for (int r = 0; r < size; ++r) total += value(r, i, epoch);
  return total;
}

}  // namespace

TEST_CASE("shared buffers: one rank has nothing to share", "[shared]") {
  auto g = world();
  if (g->size() != 1) return;
  CHECK(SharedBuffers::create(*g, 10, "test") == nullptr);
}

TEST_CASE("shared buffers: slices partition the buffer on 64-byte boundaries", "[shared]") {
  auto g = world();
  if (g->size() < 2) return;
  for (int64_t numel : {1, 15, 16, 17, 100, 1000003}) {
    auto shared = SharedBuffers::create(*g, numel, "slices test");
    REQUIRE(shared != nullptr);
    int64_t expected_first = 0;
    for (int q = 0; q < shared->size(); ++q) {
      const auto [first, last] = shared->slice(q);
      CHECK(first == expected_first);
      CHECK(last >= first);
      if (last < numel) CHECK(last % 16 == 0);
      expected_first = last;
    }
    CHECK(expected_first == numel);
  }
}

TEST_CASE("shared buffers: reduce-scatter then slices give the exact sum, use after use", "[shared]") {
  auto g = world();
  if (g->size() < 2) return;
  const int size = g->size(), rank = g->rank();
  for (int64_t numel : {1, 17, 1000003}) {
    auto shared = SharedBuffers::create(*g, numel, "reduce test");
    REQUIRE(shared != nullptr);
    CHECK(shared->local().numel() == numel);
    CHECK(shared->local().at(numel - 1) == 0.0);  // zero-filled
    for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
      INFO(numel << " elements, use " << epoch << ", rank " << rank << " of " << size);
      shared->begin(epoch);
      float* mine = shared->local().data<float>();
      for (int64_t i = 0; i < numel; ++i) mine[i] = static_cast<float>(value(rank, i, epoch));
      shared->publish(epoch);
      if (epoch == 2) {
        while (!shared->try_reduce(epoch)) {
        }
      } else {
        shared->reduce(epoch);
      }
      int64_t wrong = 0, first_wrong = -1;
      for (int q = 0; q < size; ++q) {
        const auto [first, last] = shared->slice(q);
        if (first == last) continue;
        const float* reduced = shared->reduced_slice(q, epoch);
        for (int64_t i = first; i < last; ++i) {
          if (reduced[i - first] != static_cast<float>(sum_over_ranks(size, i, epoch))) {
            if (wrong++ == 0) first_wrong = i;
          }
        }
      }
      shared->end(epoch);
      CHECK(wrong == 0);
      CHECK(first_wrong == -1);
    }
  }
}

TEST_CASE("shared buffers: windows of one segment reduce their own ranges, each with its own uses",
          "[shared]") {
  auto g = world();
  if (g->size() < 2) return;
  const int size = g->size(), rank = g->rank();
  constexpr int64_t kNumel = 1000;
  auto shared = SharedBuffers::create(*g, kNumel, "window test", DType::f32, /*windows=*/3);
  REQUIRE(shared != nullptr);
  // Windows 1 and 2 over disjoint ranges, then window 2 again over a range overlapping both.
  struct Use {
    int window;
    int64_t first, numel;
    uint64_t epoch;
  };
  const Use uses[] = {{1, 0, 400, 1}, {2, 416, 584, 1}, {2, 100, 700, 2}};
  int64_t wrong = 0;
  for (const Use& u : uses) {
    INFO("window " << u.window << " [" << u.first << ", " << u.first + u.numel << "), rank " << rank);
    auto w = shared->window(u.window, u.first, u.numel, "window");
    CHECK(w->local().numel() == u.numel);
    CHECK(w->local().data<float>() == shared->local().data<float>() + u.first);
    w->begin(u.epoch);
    float* mine = w->local().data<float>();
    for (int64_t i = 0; i < u.numel; ++i) mine[i] = static_cast<float>(value(rank, u.first + i, u.epoch));
    w->publish(u.epoch);
    w->reduce(u.epoch);
    for (int q = 0; q < size; ++q) {
      const auto [first, last] = w->slice(q);
      if (first == last) continue;
      const float* reduced = w->reduced_slice(q, u.epoch);
      for (int64_t i = first; i < last; ++i) {
        if (reduced[i - first] != static_cast<float>(sum_over_ranks(size, u.first + i, u.epoch))) ++wrong;
      }
    }
    w->end(u.epoch);
    w->wait_finished(u.epoch);  // the next use overlaps this one's range
  }
  CHECK(wrong == 0);
  CHECK_THROWS_WITH(shared->window(3, 0, 10, "beyond"), Catch::Contains("window 3 of 3"));
  CHECK_THROWS_WITH(shared->window(0, 990, 11, "beyond"), Catch::Contains("elements [990, 1001) of 1000"));
}

TEST_CASE("shared buffers: whole-range sums, float32 and int64, into this rank's memory", "[shared]") {
  auto g = world();
  if (g->size() < 2) return;
  const int size = g->size(), rank = g->rank();
  auto floats = SharedBuffers::create(*g, 1001, "sum test f32");
  auto ints = SharedBuffers::create(*g, 5, "sum test i64", DType::i64);
  REQUIRE(floats != nullptr);
  REQUIRE(ints != nullptr);
  for (uint64_t epoch = 1; epoch <= 3; ++epoch) {
    floats->begin(epoch);
    ints->begin(epoch);
    for (int64_t i = 0; i < 1001; ++i)
      floats->local().data<float>()[i] = static_cast<float>(value(rank, i, epoch));
    for (int64_t i = 0; i < 5; ++i) ints->local().data<int64_t>()[i] = (int64_t{rank + 1} << 40) + i;
    floats->publish(epoch);
    ints->publish(epoch);
    floats->wait_published(epoch);
    ints->wait_published(epoch);
    std::vector<float> f(1001);
    floats->sum_range(0, 500, f.data());  // two ranges, as the Reducer sums a bucket per gradient
    floats->sum_range(500, 501, f.data() + 500);
    std::vector<int64_t> n(5);
    ints->sum_range(0, 5, n.data());
    floats->end(epoch);
    ints->end(epoch);
    int64_t wrong = 0;
    for (int64_t i = 0; i < 1001; ++i) wrong += f[i] != static_cast<float>(sum_over_ranks(size, i, epoch));
    CHECK(wrong == 0);
    const int64_t ranks_sum = int64_t{size} * (size + 1) / 2;
    for (int64_t i = 0; i < 5; ++i)
      CHECK(n[i] == (ranks_sum << 40) + size * i);  // beyond float64's exact range
  }
  CHECK_THROWS_WITH(floats->sum_range(1000, 2, nullptr), Catch::Contains("[1000, 1002) of 1001"));
}

TEST_CASE("shared buffers: a rank that never publishes is named when the others time out", "[shared]") {
  auto g = world();
  if (g->size() < 2) return;
  const int last = g->size() - 1;
  std::vector<int> all;
  for (int r = 0; r < g->size(); ++r) all.push_back(r);
  auto group = g->new_subgroup(all);
  group->set_timeout(std::chrono::milliseconds(500));
  auto shared = SharedBuffers::create(*group, 64, "timeout test");
  REQUIRE(shared != nullptr);
  shared->begin(1);
  if (g->rank() != last) {
    shared->publish(1);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(shared->reduce(1),
                      Catch::Contains("waiting for rank " + std::to_string(last) + " to publish") &&
                          Catch::Contains("timeout test") && Catch::Contains("timed out after"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  }
  g->barrier("after the timeout test")->wait();
}
