// The ProcessGroup contract as exact-value checks, written once and run on every backend:
// MPI ranks (tests/dist/mpi/test_mpi_process_group.cpp) and thread ranks
// (tests/dist/test_thread_process_group.cpp).
//
// Contract: each check_* takes one rank's group, issues the same collectives on every rank
// whatever it finds (rank r contributes r + 1, or values as predictable), and records what
// differs in a Failures. Failures::check() turns them into one Catch2 assertion; call it on
// the thread that runs the test case (Catch2 assertions are not thread-safe), after the
// ranks are done.
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::testing {

class Failures {
 public:
  void add(int rank, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    text_ += "rank " + std::to_string(rank) + ": " + what + "\n";
  }
  void expect(int rank, bool ok, const std::string& what) {
    if (!ok) add(rank, what);
  }
  // Every element i of `t` must equal expected(i); records the first that does not.
  template <typename Expected>
  void expect_all(int rank, const Tensor& t, Expected expected) {
    std::vector<double> v = t.to_vector();
    for (size_t i = 0; i < v.size(); ++i) {
      double want = expected(static_cast<int64_t>(i));
      if (v[i] != want) {
        add(rank, t.str() + ": element " + std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " +
                      std::to_string(want));
        return;
      }
    }
  }
  void check() {
    INFO(text_);
    CHECK(text_.empty());
  }

 private:
  std::mutex mu_;
  std::string text_;
};

// The message of what `fn` throws ("" if nothing).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline const DType kCollectiveDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

inline void check_allreduce_exact(dist::ProcessGroup& g, Failures& f, const std::vector<int64_t>& counts) {
  const int n = g.size();
  const double r = g.rank() + 1;
  for (DType dtype : kCollectiveDTypes) {
    for (int64_t count : counts) {
      Tensor sum = Tensor::full({count}, r, dtype);
      Tensor avg = Tensor::full({count}, r, dtype);
      Tensor max = Tensor::full({count}, r, dtype);
      Tensor min = Tensor::full({count}, r, dtype);
      std::string tag = std::string(dtype_name(dtype)) + " x " + std::to_string(count);
      std::vector<std::shared_ptr<dist::Work>> works = {
          g.allreduce(sum, dist::ReduceOp::sum, tag), g.allreduce(avg, dist::ReduceOp::avg, tag),
          g.allreduce(max, dist::ReduceOp::max, tag), g.allreduce(min, dist::ReduceOp::min, tag)};
      for (auto& w : works) w->wait();
      for (auto& w : works) f.expect(g.rank(), w->is_completed(), w->description() + " is not completed");
      f.expect_all(g.rank(), sum, [&](int64_t) { return n * (n + 1) / 2.0; });
      f.expect_all(g.rank(), avg, [&](int64_t) { return (n + 1) / 2.0; });
      f.expect_all(g.rank(), max, [&](int64_t) { return static_cast<double>(n); });
      f.expect_all(g.rank(), min, [&](int64_t) { return 1.0; });
    }
  }
}

// int64 sums, maxima and minima past 2^53 (float64 would round them), int32 and uint8
// sums, broadcasts of both, and avg of integers refused by name.
inline void check_integers_exact(dist::ProcessGroup& g, Failures& f) {
  const int64_t n = g.size(), r = g.rank();
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor sum = Tensor::empty({3}, DType::i64), max = Tensor::empty({3}, DType::i64);
  for (int64_t i = 0; i < 3; ++i) {
    sum.data<int64_t>()[i] = i == 0 ? r + 1 : i == 1 ? -(r + 1) : big / 8 + r;
    max.data<int64_t>()[i] = big + r;
  }
  Tensor min = max.clone();
  Tensor counts = Tensor::full({5}, static_cast<double>(r + 1), DType::i32);
  Tensor bytes = Tensor::full({4}, 1.0, DType::u8);
  g.allreduce(sum, dist::ReduceOp::sum, "i64 sum")->wait();
  g.allreduce(max, dist::ReduceOp::max, "i64 max")->wait();
  g.allreduce(min, dist::ReduceOp::min, "i64 min")->wait();
  g.allreduce(counts, dist::ReduceOp::sum, "i32 sum")->wait();
  g.allreduce(bytes, dist::ReduceOp::sum, "u8 sum")->wait();
  const int64_t* s = sum.data<int64_t>();
  f.expect(
      g.rank(),
      s[0] == n * (n + 1) / 2 && s[1] == -n * (n + 1) / 2 && s[2] == n * (big / 8) + n * (n - 1) / 2,
      "int64 sum is " + std::to_string(s[0]) + ", " + std::to_string(s[1]) + ", " + std::to_string(s[2]));
  f.expect(g.rank(), max.data<int64_t>()[0] == big + n - 1,
           "int64 max is " + std::to_string(max.data<int64_t>()[0]));
  f.expect(g.rank(), min.data<int64_t>()[2] == big, "int64 min is " + std::to_string(min.data<int64_t>()[2]));
  for (int64_t i = 0; i < 5; ++i)
    f.expect(g.rank(), counts.data<int32_t>()[i] == n * (n + 1) / 2, "int32 sum");
  for (int64_t i = 0; i < 4; ++i) f.expect(g.rank(), bytes.data<uint8_t>()[i] == n, "uint8 sum");

  Tensor from_last = Tensor::empty({2}, DType::i64);
  from_last.data<int64_t>()[0] = big + r;
  from_last.data<int64_t>()[1] = -big - r;
  g.broadcast(from_last, static_cast<int>(n - 1), "i64 broadcast")->wait();
  f.expect(g.rank(),
           from_last.data<int64_t>()[0] == big + n - 1 && from_last.data<int64_t>()[1] == -big - (n - 1),
           "int64 broadcast from the last rank");
  Tensor text = Tensor::empty({3}, DType::u8);
  for (int64_t i = 0; i < 3; ++i) text.data<uint8_t>()[i] = static_cast<uint8_t>(r == 0 ? 250 + i : 0);
  g.broadcast(text, 0, "u8 broadcast")->wait();
  for (int64_t i = 0; i < 3; ++i) f.expect(g.rank(), text.data<uint8_t>()[i] == 250 + i, "uint8 broadcast");

  Tensor avg = Tensor::full({2}, 1.0, DType::i32);
  std::string error = error_of([&] { g.allreduce(avg, dist::ReduceOp::avg, "i32 avg"); });
  f.expect(g.rank(),
           contains(error, "allreduce (avg) of int32[2] on cpu") && contains(error, "not an integer"),
           "avg of int32 gave '" + error + "'");
}

inline void check_allreduce_distinct(dist::ProcessGroup& g, Failures& f) {
  const int n = g.size();
  const int r = g.rank();
  // Element i of rank r holds i + r: the sum is n*i + n(n-1)/2, the max i + n - 1.
  const int64_t count = 1001;
  std::vector<double> values(count);
  for (int64_t i = 0; i < count; ++i) values[static_cast<size_t>(i)] = static_cast<double>(i + r);
  Tensor sum = Tensor::from_values({count}, values, DType::f64);
  Tensor max = Tensor::from_values({count}, values, DType::f32);
  g.allreduce(sum, dist::ReduceOp::sum, "distinct")->wait();
  g.allreduce(max, dist::ReduceOp::max, "distinct")->wait();
  f.expect_all(r, sum, [&](int64_t i) { return n * static_cast<double>(i) + n * (n - 1) / 2.0; });
  f.expect_all(r, max, [&](int64_t i) { return static_cast<double>(i + n - 1); });

  // A gradient is a view into a bucket: only the view's elements take part.
  Tensor bucket = Tensor::full({10}, -1.0);
  Tensor view = bucket.view_range(3, {4});
  view.fill_(r + 1);
  g.allreduce(view, dist::ReduceOp::sum, "view")->wait();
  f.expect_all(r, bucket, [&](int64_t i) { return (i >= 3 && i < 7) ? n * (n + 1) / 2.0 : -1.0; });
}

inline void check_broadcast_every_root(dist::ProcessGroup& g, Failures& f,
                                       const std::vector<int64_t>& counts) {
  for (int root = 0; root < g.size(); ++root) {
    for (DType dtype : kCollectiveDTypes) {
      for (int64_t count : counts) {
        Tensor t = Tensor::full({count}, g.rank() + 1, dtype);
        g.broadcast(t, root, "root " + std::to_string(root))->wait();
        f.expect_all(g.rank(), t, [&](int64_t) { return root + 1.0; });
      }
    }
  }
}

// Into separate tensors, into views of one buffer (in place), and flat.
inline void check_allgather(dist::ProcessGroup& g, Failures& f, const std::vector<int64_t>& counts) {
  const int n = g.size();
  const int r = g.rank();
  // Rank q's element i is (q + 1) * 8 + i % 8: small integers, exact in every dtype.
  auto value = [](int q, int64_t i) { return (q + 1) * 8.0 + static_cast<double>(i % 8); };
  for (DType dtype : kCollectiveDTypes) {
    for (int64_t count : counts) {
      std::vector<double> mine(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) mine[static_cast<size_t>(i)] = value(r, i);
      Tensor in = Tensor::from_values({count}, mine, dtype);

      std::vector<Tensor> separate;
      for (int q = 0; q < n; ++q) separate.push_back(Tensor::zeros({count}, dtype));
      auto w1 = g.allgather(separate, in, "separate");

      Tensor buffer = Tensor::zeros({n * count}, dtype);
      std::vector<Tensor> views;
      for (int q = 0; q < n; ++q) views.push_back(buffer.view_range(q * count, {count}));
      views[static_cast<size_t>(r)].copy_(in);
      // In place: the input is this rank's own block of the output.
      auto w2 = g.allgather(views, views[static_cast<size_t>(r)], "in place");

      Tensor flat = Tensor::zeros({n, count}, dtype);
      auto w3 = g.allgather_flat(flat, in, "flat");
      w1->wait();
      w2->wait();
      w3->wait();
      for (int q = 0; q < n; ++q) {
        f.expect_all(r, separate[static_cast<size_t>(q)], [&](int64_t i) { return value(q, i); });
        f.expect_all(r, views[static_cast<size_t>(q)], [&](int64_t i) { return value(q, i); });
      }
      f.expect_all(r, flat, [&](int64_t i) { return value(static_cast<int>(i / count), i % count); });
      f.expect_all(r, in, [&](int64_t i) { return value(r, i); });  // the input is left alone
    }
  }
}

// Dependent operations on one tensor, issued without waiting, see each other's results.
inline void check_dependent_chain(dist::ProcessGroup& g, Failures& f) {
  const int n = g.size();
  const double sum = n * (n + 1) / 2.0;
  Tensor t = Tensor::full({7}, g.rank() + 1);
  auto a = g.allreduce(t, dist::ReduceOp::sum, "chain 1");  // n(n+1)/2
  auto b = g.allreduce(t, dist::ReduceOp::sum, "chain 2");  // n * n(n+1)/2
  auto c = g.allreduce(t, dist::ReduceOp::avg, "chain 3");  // unchanged
  auto d = g.broadcast(t, n - 1, "chain 4");                // unchanged
  d->wait();
  f.expect(g.rank(), a->is_completed() && b->is_completed() && c->is_completed(),
           "an operation issued earlier is not completed after a later one");
  f.expect_all(g.rank(), t, [&](int64_t) { return n * sum; });
}

// Even ranks, reversed order, a singleton running alongside the world, bad rank lists.
inline void check_subgroups(dist::ProcessGroup& g, Failures& f) {
  const int n = g.size();
  const int r = g.rank();
  std::vector<int> evens;
  for (int q = 0; q < n; q += 2) evens.push_back(q);
  auto sub = g.new_subgroup(evens);
  if (r % 2 != 0) {
    f.expect(r, sub == nullptr, "an odd rank got a subgroup of the even ranks");
  } else if (sub == nullptr) {
    f.add(r, "an even rank got no subgroup of the even ranks");
  } else {
    f.expect(r, sub->size() == static_cast<int>(evens.size()) && sub->rank() == r / 2,
             "subgroup rank " + std::to_string(sub->rank()) + " of " + std::to_string(sub->size()));
    f.expect(r, sub->name() == g.name() + "/{" + (n > 2 ? "0,2" : "0") + "}", "subgroup name " + sub->name());
    f.expect(r, sub->timeout() == g.timeout(), "the subgroup has another timeout than its parent");
    Tensor t = Tensor::full({1000003}, r + 1);
    sub->allreduce(t, dist::ReduceOp::sum, "evens")->wait();
    double expected = 0;
    for (int q : evens) expected += q + 1;
    f.expect_all(r, t, [&](int64_t) { return expected; });
  }
  // The parent still works, in step, after the split.
  Tensor after = Tensor::full({3}, r + 1);
  g.allreduce(after, dist::ReduceOp::max, "after split")->wait();
  f.expect_all(r, after, [&](int64_t) { return static_cast<double>(n); });

  // Subgroup rank i is the i-th listed rank.
  std::vector<int> reversed;
  for (int q = n - 1; q >= 0; --q) reversed.push_back(q);
  auto back = g.new_subgroup(reversed);
  f.expect(r, back != nullptr && back->rank() == n - 1 - r, "rank in the reversed subgroup");
  if (back) {
    Tensor t = Tensor::full({5}, r + 1);
    back->broadcast(t, 0, "from the last rank")->wait();
    f.expect_all(r, t, [&](int64_t) { return static_cast<double>(n); });
  }

  // A subgroup and its parent run operations concurrently.
  auto last = g.new_subgroup({n - 1});
  f.expect(r, (last != nullptr) == (r == n - 1), "membership of the subgroup of the last rank");
  Tensor a = Tensor::full({100000}, r + 1);
  Tensor b = Tensor::full({100000}, r + 1);
  auto wa = g.allreduce(a, dist::ReduceOp::sum, "world");
  std::shared_ptr<dist::Work> wb;
  if (last) wb = last->allreduce(b, dist::ReduceOp::sum, "singleton");
  wa->wait();
  if (wb) wb->wait();
  f.expect_all(r, a, [&](int64_t) { return n * (n + 1) / 2.0; });
  f.expect_all(r, b, [&](int64_t) { return r + 1.0; });  // a group of one sums its own value

  // Bad rank lists are refused before any communication.
  f.expect(r,
           contains(error_of([&] {
                      g.new_subgroup({0, 0});
                    }),
                    "rank 0 is listed twice"),
           "a rank listed twice");
  f.expect(r,
           contains(error_of([&] { g.new_subgroup({n}); }),
                    "rank " + std::to_string(n) + " is not a rank of process group '" + g.name() + "'"),
           "a rank out of range");
  f.expect(r, contains(error_of([&] { g.new_subgroup({}); }), "rank list is empty"), "an empty rank list");
}

// Refused at issue time with named errors; nothing is issued, so the ranks stay in step.
inline void check_bad_arguments(dist::ProcessGroup& g, Failures& f) {
  const int n = g.size();
  const int r = g.rank();
  const std::string group = "process group '" + g.name() + "'";
  Tensor t = Tensor::zeros({4});
  f.expect(r,
           contains(error_of([&] { g.broadcast(t, n, "x"); }),
                    "broadcast: root " + std::to_string(n) + " is not a rank of " + group),
           "a root out of range");
  f.expect(r, contains(error_of([&] { g.broadcast(t, -1, "x"); }), "root -1"), "a negative root");
  std::vector<Tensor> too_few;
  f.expect(r,
           contains(error_of([&] { g.allgather(too_few, t, "x"); }),
                    "0 output tensors for a process group of size"),
           "too few allgather outputs");
  std::vector<Tensor> wrong(static_cast<size_t>(n), Tensor::zeros({4}, DType::f64));
  f.expect(
      r, contains(error_of([&] { g.allgather(wrong, t, "x"); }), "allgather: output 0 is float64[4] on cpu"),
      "allgather outputs of another dtype");
  Tensor flat = Tensor::zeros({4 * n + 1});
  f.expect(r, contains(error_of([&] { g.allgather_flat(flat, t, "x"); }), "allgather_flat: output float32["),
           "a flat allgather output of the wrong size");
  Tensor undefined;
  f.expect(r,
           contains(error_of([&] { g.allreduce(undefined, dist::ReduceOp::sum, "x"); }),
                    "allreduce: the tensor is an undefined"),
           "an undefined tensor");
  f.expect(r, contains(error_of([&] { g.set_timeout(std::chrono::milliseconds(0)); }), "must be positive"),
           "a zero timeout");
  g.allreduce(t, dist::ReduceOp::sum, "still in step")->wait();
  f.expect_all(r, t, [](int64_t) { return 0.0; });
}

}  // namespace tandem::testing
