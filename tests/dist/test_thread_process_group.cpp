// ThreadProcessGroup at 1-4 thread ranks: exact values (rank r contributes r + 1) for every
// op and dtype, 16-bit rounding after each pairwise step as MPI's ops do, issue order,
// subgroups, argument errors, mismatched and skipped collectives, and run_ranks.
// Catch2 assertions are not thread-safe: ranks record what they saw, the main thread checks.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <latch>
#include <stdexcept>
#include <thread>

#include "runtime/dist/thread_process_group.h"
#include "tests/dist/collective_checks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing;

namespace {

const std::vector<int64_t> kCounts = {1, 7, 100003};
constexpr int kMaxRanks = 4;

// Runs check(group, failures) on every rank, at 1 to 4 thread ranks.
template <typename Check>
void on_thread_ranks(Check check) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    Failures failures;
    run_ranks(n, [&](std::shared_ptr<ProcessGroup> g) { check(*g, failures); });
    failures.check();
  }
}

}  // namespace

TEST_CASE("threads: a group per rank, the threads backend", "[threads]") {
  auto groups = make_thread_groups(3);
  REQUIRE(groups.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(groups[static_cast<size_t>(r)]->rank() == r);
    CHECK(groups[static_cast<size_t>(r)]->size() == 3);
    CHECK(groups[static_cast<size_t>(r)]->name() == "world");
    CHECK(groups[static_cast<size_t>(r)]->backend() == Backend::threads);
  }
  CHECK(std::string(backend_name(Backend::threads)) == "threads");
  CHECK_THROWS_WITH(make_thread_groups(0), Catch::Contains("make_thread_groups: size 0"));
  CHECK_THROWS_WITH(init_process_group(Backend::threads), Catch::Contains("make_thread_groups or run_ranks"));
}

TEST_CASE("threads: allreduce is exact for every op, dtype and size", "[threads][allreduce]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_allreduce_exact(g, f, kCounts); });
}

TEST_CASE("threads: integer dtypes reduce and broadcast exactly, past float64's 2^53",
          "[threads][allreduce]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_integers_exact(g, f); });
}

TEST_CASE("threads: allreduce of distinct values per element and of a view inside a buffer",
          "[threads][allreduce]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_allreduce_distinct(g, f); });
}

TEST_CASE("threads: 16-bit sums round after each pairwise step, in rank order, as MPI's ops do",
          "[threads][allreduce]") {
  // Values with more bits than 16-bit floats hold, so every step rounds.
  auto value = [](int rank, int64_t i) { return 1.0 + 0.0137 * static_cast<double>(i % 97) + 0.3331 * rank; };
  const int64_t count = 1000;
  for (DType dtype : {DType::f16, DType::bf16}) {
    auto to_bits = dtype == DType::f16 ? float_to_half_bits : float_to_bf16_bits;
    auto to_float = dtype == DType::f16 ? half_bits_to_float : bf16_bits_to_float;
    for (int n = 1; n <= kMaxRanks; ++n) {
      INFO(dtype_name(dtype) << ", " << n << " ranks");
      std::vector<std::vector<uint16_t>> sums(static_cast<size_t>(n)), avgs(static_cast<size_t>(n));
      run_ranks(n, [&](std::shared_ptr<ProcessGroup> g) {
        std::vector<double> mine(count);
        for (int64_t i = 0; i < count; ++i) mine[static_cast<size_t>(i)] = value(g->rank(), i);
        Tensor sum = Tensor::from_values({count}, mine, dtype);
        Tensor avg = Tensor::from_values({count}, mine, dtype);
        g->allreduce(sum, ReduceOp::sum, "sum")->wait();
        g->allreduce(avg, ReduceOp::avg, "avg")->wait();
        auto* s = static_cast<const uint16_t*>(sum.raw_data());
        auto* a = static_cast<const uint16_t*>(avg.raw_data());
        sums[static_cast<size_t>(g->rank())].assign(s, s + count);
        avgs[static_cast<size_t>(g->rank())].assign(a, a + count);
      });
      int64_t differs_from_one_rounding = 0;
      for (int64_t i = 0; i < count; ++i) {
        // acc = x0; acc = round(x_r + acc) for r = 1..n-1; avg = round(acc / n).
        float acc = to_float(to_bits(static_cast<float>(value(0, i))));
        float exact = acc;
        for (int r = 1; r < n; ++r) {
          float x = to_float(to_bits(static_cast<float>(value(r, i))));
          acc = to_float(to_bits(x + acc));
          exact += x;
        }
        uint16_t want_sum = to_bits(acc);
        uint16_t want_avg = to_bits(acc / static_cast<float>(n));
        if (to_bits(exact) != want_sum) ++differs_from_one_rounding;
        for (int r = 0; r < n; ++r) {
          INFO("element " << i << " on rank " << r);
          REQUIRE(sums[static_cast<size_t>(r)][static_cast<size_t>(i)] == want_sum);
          REQUIRE(avgs[static_cast<size_t>(r)][static_cast<size_t>(i)] == want_avg);
        }
      }
      // From 3 ranks on, rounding once at the end gives other bits for some elements, so
      // the check above tells the two apart.
      if (n >= 3) CHECK(differs_from_one_rounding > 0);
    }
  }
}

TEST_CASE("threads: broadcast from every root, every dtype and size", "[threads][broadcast]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_broadcast_every_root(g, f, kCounts); });
}

TEST_CASE("threads: allgather into separate tensors, into views of one buffer, and flat",
          "[threads][allgather]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_allgather(g, f, {1, 7, 25001}); });
}

TEST_CASE("threads: barrier holds every rank until the last arrives", "[threads][barrier]") {
  using Clock = std::chrono::steady_clock;
  const auto kDelay = std::chrono::milliseconds(200);
  std::vector<Clock::duration> waited(3);
  std::string description;
  run_ranks(3, [&](std::shared_ptr<ProcessGroup> g) {
    g->barrier("align")->wait();
    if (g->rank() == 0) std::this_thread::sleep_for(kDelay);
    auto start = Clock::now();
    auto work = g->barrier("after rank 0 sleeps");
    work->wait();
    waited[static_cast<size_t>(g->rank())] = Clock::now() - start;
    if (g->rank() == 0) description = work->description();
  });
  CHECK(waited[1] >= kDelay - std::chrono::milliseconds(50));
  CHECK(waited[2] >= kDelay - std::chrono::milliseconds(50));
  CHECK(description == "barrier, tag 'after rank 0 sleeps'");
}

TEST_CASE("threads: operations return at once and complete in issue order", "[threads][async]") {
  auto groups = make_thread_groups(2);
  // One thread drives both ranks: rank 0 issues everything before rank 1 issues anything.
  constexpr int kOps = 16;
  std::vector<Tensor> tensors[2];
  std::vector<std::shared_ptr<Work>> works[2];
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < kOps; ++k) {
      tensors[r].push_back(Tensor::full({1 + 37 * k}, r + 1, k % 2 ? DType::f64 : DType::f32));
      works[r].push_back(groups[static_cast<size_t>(r)]->allreduce(tensors[r].back(), ReduceOp::sum,
                                                                   "op " + std::to_string(k)));
      if (r == 0) CHECK_FALSE(works[0].back()->is_completed());  // rank 1 has not issued it yet
    }
  }
  for (int k = 0; k < kOps; ++k) {
    CHECK(works[0][static_cast<size_t>(k)]->is_completed());
    works[0][static_cast<size_t>(k)]->wait();
    works[1][static_cast<size_t>(k)]->wait();
    CHECK(tensors[0][static_cast<size_t>(k)].at(0) == 3.0);
    CHECK(tensors[1][static_cast<size_t>(k)].at(36 * k) == 3.0);
  }

  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_dependent_chain(g, f); });
}

TEST_CASE("threads: subgroups", "[threads][subgroup]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_subgroups(g, f); });
}

TEST_CASE("threads: bad arguments throw named errors at issue time", "[threads][errors]") {
  on_thread_ranks([](ProcessGroup& g, Failures& f) { check_bad_arguments(g, f); });
}

TEST_CASE("threads: a skipped collective times out with a named error and the group is unusable after",
          "[threads][timeout]") {
  using Clock = std::chrono::steady_clock;
  for (int n = 2; n <= kMaxRanks; ++n) {
    INFO(n << " ranks");
    const int skipper = n - 1;
    std::vector<std::string> timeouts(static_cast<size_t>(n)), afterwards(static_cast<size_t>(n));
    std::vector<Clock::duration> waited(static_cast<size_t>(n));
    std::latch timed_out(n - 1);
    auto start = Clock::now();
    run_ranks(n, [&](std::shared_ptr<ProcessGroup> g) {
      const int r = g->rank();
      g->set_timeout(std::chrono::milliseconds(300));
      if (r != skipper) {
        Tensor t = Tensor::full({5}, 1.0);
        auto work = g->allreduce(t, ReduceOp::sum, "skipped by the last rank");
        auto begin = Clock::now();
        timeouts[static_cast<size_t>(r)] = error_of([&] { work->wait(); });
        waited[static_cast<size_t>(r)] = Clock::now() - begin;
        timed_out.count_down();
      } else {
        timed_out.wait();  // the skipper comes back only after the others gave up
      }
      Tensor t = Tensor::full({5}, 1.0);
      afterwards[static_cast<size_t>(r)] = error_of([&] { g->allreduce(t, ReduceOp::sum, "later")->wait(); });
    });
    CHECK(Clock::now() - start < std::chrono::seconds(10));
    int own_timeouts = 0;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      const std::string& message = timeouts[static_cast<size_t>(r)];
      if (r != skipper) {
        INFO(message);
        // Either this rank's own timeout, or another rank's that failed the group first.
        CHECK(contains(message,
                       "allreduce (sum) of 5 float32 elements, tag 'skipped by the last rank', timed out "
                       "after 0.3 s on rank "));
        CHECK(contains(message, " of " + std::to_string(n) +
                                    " (20 bytes, collective #1 of thread process group "
                                    "'world' of " +
                                    std::to_string(n) + " ranks; not issued by rank " +
                                    std::to_string(skipper) + ")"));
        CHECK(contains(message, "every rank must issue the same collectives in the same order"));
        if (contains(message, "on rank " + std::to_string(r) + " of ")) ++own_timeouts;
        CHECK(waited[static_cast<size_t>(r)] >= std::chrono::milliseconds(250));
        CHECK(waited[static_cast<size_t>(r)] < std::chrono::seconds(5));
      }
      INFO(afterwards[static_cast<size_t>(r)]);
      CHECK(contains(afterwards[static_cast<size_t>(r)],
                     "allreduce (sum) of 5 float32 elements, tag 'later': "
                     "thread process group 'world' of " +
                         std::to_string(n) +
                         " ranks is unusable after an earlier "
                         "failure: "));
    }
    CHECK(own_timeouts >= 1);
  }
}

TEST_CASE("threads: ranks that issue different collectives get an error naming each", "[threads][errors]") {
  std::vector<std::string> errors(2), afterwards(2);
  run_ranks(2, [&](std::shared_ptr<ProcessGroup> g) {
    Tensor t = Tensor::full({4}, 1.0);
    std::shared_ptr<Work> work =
        g->rank() == 0 ? g->allreduce(t, ReduceOp::sum, "grads") : g->broadcast(t, 0, "init");
    errors[static_cast<size_t>(g->rank())] = error_of([&] { work->wait(); });
    afterwards[static_cast<size_t>(g->rank())] = error_of([&] { g->barrier("later")->wait(); });
  });
  for (int r = 0; r < 2; ++r) {
    INFO(errors[static_cast<size_t>(r)]);
    CHECK(contains(
        errors[static_cast<size_t>(r)],
        "collective #1 of thread process group 'world' of 2 ranks: the ranks issued different operations "
        "(rank 0: allreduce (sum) of 4 float32 elements, tag 'grads'; rank 1: broadcast (root 0) of 4 "
        "float32 elements, tag 'init')"));
    CHECK(contains(afterwards[static_cast<size_t>(r)], "unusable after an earlier failure"));
  }
}

TEST_CASE("threads: run_ranks names the rank that threw first and stops the others waiting",
          "[threads][run_ranks]") {
  using Clock = std::chrono::steady_clock;
  std::string waiting;
  auto start = Clock::now();
  std::string error = error_of([&] {
    run_ranks(3, [&](std::shared_ptr<ProcessGroup> g) {
      if (g->rank() == 1) throw std::runtime_error("boom");
      Tensor t = Tensor::full({3}, 1.0);
      if (g->rank() == 2) waiting = error_of([&] { g->allreduce(t, ReduceOp::sum, "never")->wait(); });
    });
  });
  CHECK(Clock::now() - start < std::chrono::seconds(10));  // not the 300 s timeout
  CHECK(contains(error, "rank 1 of 3 threw: boom"));
  // Failed while waiting, or refused at issue if rank 1 threw before rank 2 got there.
  CHECK(contains(waiting, "allreduce (sum) of 3 float32 elements, tag 'never'"));
  CHECK(contains(waiting, "rank 1 threw: boom"));
  CHECK_THROWS_WITH(run_ranks(0, [](std::shared_ptr<ProcessGroup>) {}), Catch::Contains("run_ranks: size 0"));
  std::atomic<int> ran{0};
  run_ranks(4, [&](std::shared_ptr<ProcessGroup>) { ++ran; });
  CHECK(ran == 4);
}

TEST_CASE("threads: destroying a group waits for its pending operations", "[threads]") {
  auto groups = make_thread_groups(2);
  Tensor a = Tensor::full({3}, 1.0), b = Tensor::full({3}, 2.0);
  auto work = groups[0]->allreduce(a, ReduceOp::sum, "pending");
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    groups[1]->allreduce(b, ReduceOp::sum, "pending")->wait();
  });
  groups[0].reset();  // returns once rank 1 has issued its part
  CHECK(work->is_completed());
  other.join();
  work->wait();
  CHECK(a.at(2) == 3.0);
}

TEST_CASE("threads: abort fails every rank's pending and later operations, subgroups too", "[threads]") {
  auto groups = make_thread_groups(2);
  auto subs = std::vector<std::shared_ptr<ProcessGroup>>(2);
  std::thread other([&] { subs[1] = groups[1]->new_subgroup({0, 1}); });
  subs[0] = groups[0]->new_subgroup({0, 1});
  other.join();
  Tensor t = Tensor::full({2}, 1.0);
  auto pending = groups[0]->allreduce(t, ReduceOp::sum, "pending");
  auto pending_sub = subs[0]->barrier("pending in the subgroup");
  static_cast<ThreadProcessGroup&>(*groups[1]).abort("stopped by the test");
  CHECK_THROWS_WITH(pending->wait(),
                    Catch::Contains("allreduce (sum) of 2 float32 elements, tag 'pending' "
                                    "(collective #2 of thread process group 'world' of 2 ranks) "
                                    "cannot complete: stopped by the test"));
  CHECK(pending->is_completed());
  CHECK_THROWS_WITH(pending_sub->wait(), Catch::Contains("cannot complete: stopped by the test"));
  CHECK_THROWS_WITH(groups[1]->barrier("later"),
                    Catch::Contains("is unusable after an earlier failure: stopped"));
  CHECK_THROWS_WITH(subs[1]->barrier("later"),
                    Catch::Contains("is unusable after an earlier failure: stopped"));
}
