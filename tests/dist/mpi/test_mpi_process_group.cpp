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

using namespace tandem;
using namespace tandem::dist;

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

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const int64_t kCounts[] = {1, 7, 1000003};

// Number of elements of `t` that differ from `expected(i)`, with the first one described.
template <typename Expected>
int64_t mismatches(const Tensor& t, Expected expected, std::string* first) {
  std::vector<double> v = t.to_vector();
  int64_t bad = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    double want = expected(static_cast<int64_t>(i));
    if (v[i] != want) {
      if (bad == 0) {
        std::ostringstream os;
        os << "element " << i << " is " << v[i] << ", expected " << want;
        *first = os.str();
      }
      ++bad;
    }
  }
  return bad;
}

#define CHECK_ALL(tensor, expr)                                                   \
  do {                                                                            \
    std::string first_;                                                           \
    int64_t bad_ = mismatches((tensor), [&](int64_t i) { (void)i; return (expr); }, &first_); \
    INFO((tensor).str() << ": " << first_);                                       \
    CHECK(bad_ == 0);                                                             \
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
  auto g = world();
  const int n = g->size();
  const double r = g->rank() + 1;
  for (DType dtype : kDTypes) {
    for (int64_t count : kCounts) {
      Tensor sum = Tensor::full({count}, r, dtype);
      Tensor avg = Tensor::full({count}, r, dtype);
      Tensor max = Tensor::full({count}, r, dtype);
      Tensor min = Tensor::full({count}, r, dtype);
      std::string tag = std::string(dtype_name(dtype)) + " x " + std::to_string(count);
      std::vector<std::shared_ptr<Work>> works = {
          g->allreduce(sum, ReduceOp::sum, tag), g->allreduce(avg, ReduceOp::avg, tag),
          g->allreduce(max, ReduceOp::max, tag), g->allreduce(min, ReduceOp::min, tag)};
      for (auto& w : works) w->wait();
      for (auto& w : works) CHECK(w->is_completed());
      CHECK_ALL(sum, n * (n + 1) / 2.0);
      CHECK_ALL(avg, (n + 1) / 2.0);
      CHECK_ALL(max, static_cast<double>(n));
      CHECK_ALL(min, 1.0);
    }
  }
}

TEST_CASE("mpi: integer dtypes reduce and broadcast exactly, past float64's 2^53", "[mpi][allreduce]") {
  auto g = world();
  const int64_t n = g->size(), r = g->rank();
  const int64_t big = (int64_t{1} << 60) + 1;  // not representable in float64
  Tensor sum = Tensor::empty({3}, DType::i64), max = Tensor::empty({3}, DType::i64);
  for (int64_t i = 0; i < 3; ++i) {
    sum.data<int64_t>()[i] = i == 0 ? r + 1 : i == 1 ? -(r + 1) : big / 8 + r;
    max.data<int64_t>()[i] = big + r;
  }
  Tensor min = max.clone();
  Tensor counts = Tensor::full({5}, static_cast<double>(r + 1), DType::i32);
  Tensor bytes = Tensor::full({4}, 1.0, DType::u8);
  g->allreduce(sum, ReduceOp::sum, "i64 sum")->wait();
  g->allreduce(max, ReduceOp::max, "i64 max")->wait();
  g->allreduce(min, ReduceOp::min, "i64 min")->wait();
  g->allreduce(counts, ReduceOp::sum, "i32 sum")->wait();
  g->allreduce(bytes, ReduceOp::sum, "u8 sum")->wait();
  CHECK(sum.data<int64_t>()[0] == n * (n + 1) / 2);
  CHECK(sum.data<int64_t>()[1] == -n * (n + 1) / 2);
  CHECK(sum.data<int64_t>()[2] == n * (big / 8) + n * (n - 1) / 2);
  CHECK(max.data<int64_t>()[0] == big + n - 1);
  CHECK(min.data<int64_t>()[2] == big);
  for (int64_t i = 0; i < 5; ++i) CHECK(counts.data<int32_t>()[i] == n * (n + 1) / 2);
  for (int64_t i = 0; i < 4; ++i) CHECK(bytes.data<uint8_t>()[i] == n);

  Tensor from_last = Tensor::empty({2}, DType::i64);
  from_last.data<int64_t>()[0] = big + r;
  from_last.data<int64_t>()[1] = -big - r;
  g->broadcast(from_last, static_cast<int>(n - 1), "i64 broadcast")->wait();
  CHECK(from_last.data<int64_t>()[0] == big + n - 1);
  CHECK(from_last.data<int64_t>()[1] == -big - (n - 1));

  Tensor text = Tensor::empty({3}, DType::u8);
  for (int64_t i = 0; i < 3; ++i) text.data<uint8_t>()[i] = static_cast<uint8_t>(r == 0 ? 250 + i : 0);
  g->broadcast(text, 0, "u8 broadcast")->wait();
  for (int64_t i = 0; i < 3; ++i) CHECK(text.data<uint8_t>()[i] == 250 + i);

  Tensor avg = Tensor::full({2}, 1.0, DType::i32);
  CHECK_THROWS_WITH(g->allreduce(avg, ReduceOp::avg, "i32 avg"),
                    Catch::Contains("allreduce (avg) of int32[2] on cpu") && Catch::Contains("not an integer"));
}

TEST_CASE("mpi: allreduce of distinct values per element and of a view inside a buffer", "[mpi][allreduce]") {
  auto g = world();
  const int n = g->size();
  const int r = g->rank();
  // Element i of rank r holds i + r: the sum is n*i + n(n-1)/2, the max i + n - 1.
  const int64_t count = 1001;
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = static_cast<double>(i + r);
  Tensor sum = Tensor::from_values({count}, values, DType::f64);
  Tensor max = Tensor::from_values({count}, values, DType::f32);
  g->allreduce(sum, ReduceOp::sum, "distinct")->wait();
  g->allreduce(max, ReduceOp::max, "distinct")->wait();
  CHECK_ALL(sum, static_cast<double>(n) * static_cast<double>(i) + n * (n - 1) / 2.0);
  CHECK_ALL(max, static_cast<double>(i + n - 1));

  // A gradient is a view into a bucket: only the view's elements take part.
  Tensor bucket = Tensor::full({10}, -1.0);
  Tensor view = bucket.view_range(3, {4});
  view.fill_(r + 1);
  g->allreduce(view, ReduceOp::sum, "view")->wait();
  CHECK_ALL(bucket, (i >= 3 && i < 7) ? n * (n + 1) / 2.0 : -1.0);
}

TEST_CASE("mpi: broadcast from every root, every dtype and size", "[mpi][broadcast]") {
  auto g = world();
  for (int root = 0; root < g->size(); ++root) {
    for (DType dtype : kDTypes) {
      for (int64_t count : kCounts) {
        Tensor t = Tensor::full({count}, g->rank() + 1, dtype);
        g->broadcast(t, root, "root " + std::to_string(root))->wait();
        CHECK_ALL(t, root + 1.0);
      }
    }
  }
}

TEST_CASE("mpi: allgather into separate tensors, into views of one buffer, and flat", "[mpi][allgather]") {
  auto g = world();
  const int n = g->size();
  const int r = g->rank();
  // Rank q's element i is (q + 1) * 8 + i % 8: small integers, exact in every dtype.
  auto value = [](int q, int64_t i) { return (q + 1) * 8.0 + static_cast<double>(i % 8); };
  for (DType dtype : kDTypes) {
    for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{250001}}) {
      std::vector<double> mine(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) mine[static_cast<size_t>(i)] = value(r, i);
      Tensor in = Tensor::from_values({count}, mine, dtype);

      std::vector<Tensor> separate;
      for (int q = 0; q < n; ++q) separate.push_back(Tensor::zeros({count}, dtype));
      auto w1 = g->allgather(separate, in, "separate");

      Tensor buffer = Tensor::zeros({n * count}, dtype);
      std::vector<Tensor> views;
      for (int q = 0; q < n; ++q) views.push_back(buffer.view_range(q * count, {count}));
      views[static_cast<size_t>(r)].copy_(in);
      // In place: the input is this rank's own block of the output.
      auto w2 = g->allgather(views, views[static_cast<size_t>(r)], "in place");

      Tensor flat = Tensor::zeros({n, count}, dtype);
      auto w3 = g->allgather_flat(flat, in, "flat");
      w1->wait();
      w2->wait();
      w3->wait();
      for (int q = 0; q < n; ++q) {
        CHECK_ALL(separate[static_cast<size_t>(q)], value(q, i));
        CHECK_ALL(views[static_cast<size_t>(q)], value(q, i));
      }
      CHECK_ALL(flat, value(static_cast<int>(i / count), i % count));
      CHECK_ALL(in, value(r, i));  // the input is left alone
    }
  }
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

  // Dependent operations on one tensor, issued without waiting, see each other's results.
  Tensor t = Tensor::full({7}, g->rank() + 1);
  auto a = g->allreduce(t, ReduceOp::sum, "chain 1");     // n(n+1)/2
  auto b = g->allreduce(t, ReduceOp::sum, "chain 2");     // n * n(n+1)/2
  auto c = g->allreduce(t, ReduceOp::avg, "chain 3");     // unchanged
  auto d = g->broadcast(t, n - 1, "chain 4");             // unchanged
  d->wait();
  CHECK(a->is_completed());
  CHECK(b->is_completed());
  CHECK(c->is_completed());
  CHECK_ALL(t, n * sum);
}

TEST_CASE("mpi: subgroups", "[mpi][subgroup]") {
  auto g = world();
  const int n = g->size();
  const int r = g->rank();

  SECTION("even ranks") {
    std::vector<int> evens;
    for (int q = 0; q < n; q += 2) evens.push_back(q);
    auto sub = g->new_subgroup(evens);
    if (r % 2 != 0) {
      CHECK(sub == nullptr);
    } else {
      REQUIRE(sub != nullptr);
      CHECK(sub->size() == static_cast<int>(evens.size()));
      CHECK(sub->rank() == r / 2);
      CHECK(sub->name() == "world/{" + std::string(n > 2 ? "0,2" : "0") + "}");
      CHECK(sub->timeout() == g->timeout());
      Tensor t = Tensor::full({1000003}, r + 1);
      sub->allreduce(t, ReduceOp::sum, "evens")->wait();
      double expected = 0;
      for (int q : evens) expected += q + 1;
      CHECK_ALL(t, expected);
      auto* mpi = dynamic_cast<MpiProcessGroup*>(sub.get());
      REQUIRE(mpi != nullptr);
      CHECK(mpi->world_ranks() == evens);
    }
    // The world group still works, in step, after the split.
    Tensor t = Tensor::full({3}, r + 1);
    g->allreduce(t, ReduceOp::max, "after split")->wait();
    CHECK_ALL(t, static_cast<double>(n));
  }

  SECTION("reversed order: subgroup rank i is the i-th listed rank") {
    std::vector<int> reversed;
    for (int q = n - 1; q >= 0; --q) reversed.push_back(q);
    auto sub = g->new_subgroup(reversed);
    REQUIRE(sub != nullptr);
    CHECK(sub->rank() == n - 1 - r);
    Tensor t = Tensor::full({5}, r + 1);
    sub->broadcast(t, 0, "from the last world rank")->wait();
    CHECK_ALL(t, static_cast<double>(n));
  }

  SECTION("a subgroup and the world run operations concurrently") {
    std::vector<int> last{n - 1};
    auto sub = g->new_subgroup(last);
    CHECK((sub != nullptr) == (r == n - 1));
    Tensor a = Tensor::full({100000}, r + 1);
    Tensor b = Tensor::full({100000}, r + 1);
    auto wa = g->allreduce(a, ReduceOp::sum, "world");
    std::shared_ptr<Work> wb;
    if (sub) wb = sub->allreduce(b, ReduceOp::sum, "singleton");
    wa->wait();
    if (wb) wb->wait();
    CHECK_ALL(a, n * (n + 1) / 2.0);
    CHECK_ALL(b, r + 1.0);  // a group of one sums its own value
  }

  SECTION("bad rank lists are refused before any communication") {
    CHECK_THROWS_WITH(g->new_subgroup({0, 0}), Catch::Contains("rank 0 is listed twice"));
    CHECK_THROWS_WITH(g->new_subgroup({n}), Catch::Contains("rank " + std::to_string(n) +
                                                            " is not a rank of process group 'world'"));
    CHECK_THROWS_WITH(g->new_subgroup({}), Catch::Contains("rank list is empty"));
  }
}

TEST_CASE("mpi: bad arguments throw named errors at issue time", "[mpi][errors]") {
  auto g = world();
  const int n = g->size();
  Tensor t = Tensor::zeros({4});
  CHECK_THROWS_WITH(g->broadcast(t, n, "x"), Catch::Contains("broadcast: root " + std::to_string(n) +
                                                             " is not a rank of process group 'world'"));
  CHECK_THROWS_WITH(g->broadcast(t, -1, "x"), Catch::Contains("root -1"));
  std::vector<Tensor> too_few;
  CHECK_THROWS_WITH(g->allgather(too_few, t, "x"), Catch::Contains("0 output tensors for a process group of size"));
  std::vector<Tensor> wrong(static_cast<size_t>(n), Tensor::zeros({4}, DType::f64));
  CHECK_THROWS_WITH(g->allgather(wrong, t, "x"), Catch::Contains("allgather: output 0 is float64[4] on cpu"));
  Tensor flat = Tensor::zeros({4 * n + 1});
  CHECK_THROWS_WITH(g->allgather_flat(flat, t, "x"), Catch::Contains("allgather_flat: output float32["));
  Tensor undefined;
  CHECK_THROWS_WITH(g->allreduce(undefined, ReduceOp::sum, "x"), Catch::Contains("allreduce: the tensor is an undefined"));
  CHECK_THROWS_WITH(g->set_timeout(std::chrono::milliseconds(0)), Catch::Contains("must be positive"));
  // Nothing was issued, so the ranks are still in step.
  g->allreduce(t, ReduceOp::sum, "still in step")->wait();
  CHECK_ALL(t, 0.0);
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
