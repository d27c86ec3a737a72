// MpiProcessGroup at 1-4 ranks: exact values (rank r contributes r + 1), every op and dtype,
// odd sizes, ordering of outstanding work, subgroups and argument errors. Value checks use
// CHECK, never REQUIRE, so every rank keeps issuing the same collectives.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "runtime/dist/mpi_check.h"
#include "runtime/dist/mpi_process_group.h"
#include "tests/dist/collective_checks.h"

using namespace tandem;
using namespace tandem::dist;
using namespace tandem::testing;

namespace {

std::shared_ptr<ProcessGroup> world() {
  static std::shared_ptr<ProcessGroup> group = [] {
    auto g = init_process_group(Backend::mpi);
    // Short enough that a test that desynchronises the ranks fails with a named timeout
    // well inside CTest's limit.
    g->set_timeout(std::chrono::seconds(30));
    return g;
  }();
  return group;
}

const std::vector<int64_t> kCounts = {1, 7, 1000003};

// Runs a check of collective_checks.h on this rank.
template <typename Check>
void on_world(Check check) {
  Failures failures;
  check(*world(), failures);
  failures.check();
}

// Every element i of `tensor` equals `expr` (which may use i).
#define CHECK_ALL(tensor, expr)                                      \
  do {                                                               \
    Failures failures_;                                              \
    failures_.expect_all(world()->rank(), (tensor), [&](int64_t i) { \
      (void)i;                                                       \
      return static_cast<double>(expr);                              \
    });                                                              \
    failures_.check();                                               \
  } while (0)

}  // namespace

TEST_CASE("mpi: the world group matches MPI_COMM_WORLD", "[mpi]") {
  auto g = world();
  int rank = 0, size = 0;
  TANDEM_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  TANDEM_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &size));
  CHECK(g->rank() == rank);
  CHECK(g->size() == size);
  CHECK(g->backend() == Backend::mpi);
  CHECK(g->name() == "world");
  CHECK(process_rank() == rank);
  auto* mpi = dynamic_cast<MpiProcessGroup*>(g.get());
  REQUIRE(mpi != nullptr);
  CHECK(mpi->world_ranks().size() == static_cast<size_t>(size));
  int cmp = MPI_UNEQUAL;
  TANDEM_CHECK_MPI(MPI_Comm_compare(mpi->comm(), MPI_COMM_WORLD, &cmp));
  CHECK(cmp == MPI_CONGRUENT);  // a duplicate, not MPI_COMM_WORLD itself
}

TEST_CASE("mpi: allreduce is exact for every op, dtype and size", "[mpi][allreduce]") {
  on_world([](ProcessGroup& g, Failures& f) { check_allreduce_exact(g, f, kCounts); });
}

TEST_CASE("mpi: integer dtypes reduce and broadcast exactly, past float64's 2^53", "[mpi][allreduce]") {
  on_world([](ProcessGroup& g, Failures& f) { check_integers_exact(g, f); });
}

TEST_CASE("mpi: allreduce of distinct values per element and of a view inside a buffer", "[mpi][allreduce]") {
  on_world([](ProcessGroup& g, Failures& f) { check_allreduce_distinct(g, f); });
}

TEST_CASE("mpi: broadcast from every root, every dtype and size", "[mpi][broadcast]") {
  on_world([](ProcessGroup& g, Failures& f) { check_broadcast_every_root(g, f, kCounts); });
}

TEST_CASE("mpi: allgather into separate tensors, into views of one buffer, and flat", "[mpi][allgather]") {
  on_world([](ProcessGroup& g, Failures& f) { check_allgather(g, f, {1, 7, 250001}); });
}

TEST_CASE("mpi: barrier holds every rank until the last arrives", "[mpi][barrier]") {
  auto g = world();
  g->barrier("align")->wait();
  using Clock = std::chrono::steady_clock;
  const auto kDelay = std::chrono::milliseconds(300);
  if (g->rank() == 0) std::this_thread::sleep_for(kDelay);
  auto start = Clock::now();
  auto work = g->barrier("after rank 0 sleeps");
  work->wait();
  auto waited = Clock::now() - start;
  if (g->rank() != 0) {
    // The others started their barrier before rank 0 woke up.
    CHECK(waited >= kDelay - std::chrono::milliseconds(100));
  }
  CHECK(work->is_completed());
  CHECK(work->description() == "barrier, tag 'after rank 0 sleeps'");
}

TEST_CASE("mpi: operations return at once and run while the caller computes", "[mpi][async]") {
  auto g = world();
  g->barrier("align")->wait();
  Tensor t = Tensor::full({1000}, g->rank() + 1);
  if (g->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto work = g->allreduce(t, ReduceOp::sum, "late rank 0");
  if (g->rank() != 0) {
    // Rank 0 has not issued its part yet, so this one cannot have completed.
    CHECK_FALSE(work->is_completed());
  }
  // Compute while it runs.
  double acc = 0;
  for (int i = 0; i < 1000000; ++i) acc += 1e-9 * i;
  CHECK(acc > 0);
  work->wait();
  const int n = g->size();
  CHECK_ALL(t, n * (n + 1) / 2.0);
}

TEST_CASE("mpi: many outstanding operations complete in issue order", "[mpi][async]") {
  auto g = world();
  const int n = g->size();
  const double sum = n * (n + 1) / 2.0;
  constexpr int kOps = 64;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kOps; ++k) {
    int64_t count = (k % 8 == 0) ? 200003 : 1 + 37 * k;
    tensors.push_back(Tensor::full({count}, g->rank() + 1, k % 2 ? DType::f64 : DType::f32));
    works.push_back(g->allreduce(tensors.back(), ReduceOp::sum, "op " + std::to_string(k)));
  }
  // Watch completions as they happen: a completed op never follows an unfinished one.
  bool in_order = true;
  while (!works.back()->is_completed()) {
    bool seen_unfinished = false;
    for (auto& w : works) {
      bool done = w->is_completed();
      if (done && seen_unfinished) in_order = false;
      seen_unfinished = seen_unfinished || !done;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  CHECK(in_order);
  for (auto& w : works) CHECK(w->is_completed());  // the last done means all done
  for (auto& w : works) w->wait();
  for (auto& t : tensors) CHECK_ALL(t, sum);

  on_world([](ProcessGroup& g, Failures& f) { check_dependent_chain(g, f); });
}

TEST_CASE("mpi: subgroups", "[mpi][subgroup]") {
  on_world([](ProcessGroup& g, Failures& f) { check_subgroups(g, f); });
  // A subgroup knows its ranks in MPI_COMM_WORLD.
  auto g = world();
  std::vector<int> evens;
  for (int q = 0; q < g->size(); q += 2) evens.push_back(q);
  auto sub = g->new_subgroup(evens);
  if (sub) {
    auto* mpi = dynamic_cast<MpiProcessGroup*>(sub.get());
    REQUIRE(mpi != nullptr);
    CHECK(mpi->world_ranks() == evens);
  }
}

TEST_CASE("mpi: bad arguments throw named errors at issue time", "[mpi][errors]") {
  on_world([](ProcessGroup& g, Failures& f) { check_bad_arguments(g, f); });
}

TEST_CASE("mpi: the timeout is per group and applies to later operations", "[mpi][timeout]") {
  auto g = world();
  auto sub = g->new_subgroup({0});
  if (sub) {
    CHECK(sub->timeout() == std::chrono::seconds(30));
    sub->set_timeout(std::chrono::milliseconds(1500));
    CHECK(sub->timeout() == std::chrono::milliseconds(1500));
    Tensor t = Tensor::full({3}, 2.0);
    sub->allreduce(t, ReduceOp::sum, "quick")->wait();  // well inside its deadline
    CHECK_ALL(t, 2.0);
  }
  CHECK(g->timeout() == std::chrono::seconds(30));
  auto fresh = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "fresh");
  CHECK(fresh->timeout() == default_timeout());
}

TEST_CASE("mpi: init_process_group names a launch variable that disagrees with MPI", "[mpi][launch_env]") {
  auto g = world();  // MPI is up; the check below happens before any collective
  const char* kName = "OMPI_COMM_WORLD_SIZE";
  const char* before = std::getenv(kName);
  std::string saved = before ? before : "";
  const char* rank_before = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank_before == nullptr) setenv("OMPI_COMM_WORLD_RANK", std::to_string(g->rank()).c_str(), 1);
  if (std::getenv("OMPI_COMM_WORLD_LOCAL_RANK") == nullptr) setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  if (std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE") == nullptr) setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "1", 1);
  setenv(kName, std::to_string(g->size() + 1).c_str(), 1);
  CHECK_THROWS_WITH(init_process_group(Backend::mpi),
                    Catch::Contains("of " + std::to_string(g->size() + 1) + " (local") &&
                        Catch::Contains("but MPI_COMM_WORLD has " + std::to_string(g->size()) + " ranks"));
  if (before) {
    setenv(kName, saved.c_str(), 1);
  } else {
    unsetenv(kName);
  }
  if (rank_before == nullptr) {
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  g->barrier("after the launch check")->wait();
}
