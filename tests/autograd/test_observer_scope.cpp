// Backward observers across threads: the process-wide list under concurrent use, and
// ThreadObserverScope giving a thread (one rank of an in-process group) observers of its own.
#include <atomic>
#include <catch2/catch.hpp>
#include <latch>
#include <thread>
#include <vector>

#include "autograd/engine.h"
#include "autograd/observer_scope.h"
#include "autograd/ops.h"

using namespace tandem;

namespace {

struct CountingObserver : BackwardObserver {
  std::atomic<int> begins{0}, ends{0};
  void on_backward_begin(const BackwardPass&) override { ++begins; }
  void on_backward_end(const BackwardPass&) override { ++ends; }
};

void one_backward() {
  Variable w = tensor({2}, {1.0, 2.0}, true);
  sum(w * w).backward();
}

}  // namespace

TEST_CASE("a scoped thread's observers see its backwards only, and the process-wide ones see none of them",
          "[engine][observers]") {
  CountingObserver process_wide;
  Engine::add_observer(&process_wide);
  constexpr int kThreads = 4, kBackwards = 25;
  std::vector<int> begins(kThreads), ends(kThreads);
  std::latch registered(kThreads), done(kThreads);  // every thread's observer is in place throughout
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ThreadObserverScope scope;
      CountingObserver mine;
      Engine::add_observer(&mine);
      registered.arrive_and_wait();
      for (int k = 0; k < kBackwards + t; ++k) one_backward();
      done.arrive_and_wait();
      Engine::remove_observer(&mine);
      one_backward();  // after removal: not seen
      begins[static_cast<size_t>(t)] = mine.begins;
      ends[static_cast<size_t>(t)] = mine.ends;
    });
  }
  for (std::thread& t : threads) t.join();
  one_backward();  // on this unscoped thread: the process-wide observer sees it
  Engine::remove_observer(&process_wide);
  for (int t = 0; t < kThreads; ++t) {
    CHECK(begins[static_cast<size_t>(t)] == kBackwards + t);
    CHECK(ends[static_cast<size_t>(t)] == kBackwards + t);
  }
  CHECK(process_wide.begins == 1);
  CHECK(process_wide.ends == 1);
}

TEST_CASE("scopes do not nest, and the process-wide list is back after one ends", "[engine][observers]") {
  CountingObserver process_wide;
  Engine::add_observer(&process_wide);
  {
    ThreadObserverScope scope;
    CHECK_THROWS_WITH(ThreadObserverScope(), Catch::Contains("already inside one"));
    one_backward();
  }
  one_backward();
  Engine::remove_observer(&process_wide);
  CHECK(process_wide.begins == 1);
}

TEST_CASE("the process-wide list takes registrations and backwards from several threads at once",
          "[engine][observers]") {
  CountingObserver always;
  Engine::add_observer(&always);
  constexpr int kThreads = 4, kRounds = 200;
  // Observers outlive every thread's backwards: another thread's backward may still be
  // calling one that its own thread has just removed.
  std::vector<std::vector<CountingObserver>> transient(kThreads);
  for (auto& list : transient) list = std::vector<CountingObserver>(kRounds);
  std::latch start(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      // The list grows and shrinks (reallocating) while the other threads copy it.
      for (CountingObserver& o : transient[static_cast<size_t>(t)]) {
        Engine::add_observer(&o);
        one_backward();
      }
      for (CountingObserver& o : transient[static_cast<size_t>(t)]) {
        Engine::remove_observer(&o);
        one_backward();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  Engine::remove_observer(&always);
  CHECK(always.begins == 2 * kThreads * kRounds);
  CHECK(always.ends == 2 * kThreads * kRounds);
  for (const auto& list : transient) {
    for (const CountingObserver& o : list) {
      CHECK(o.begins >= 1);  // at least its own thread's backward
      CHECK(o.ends == o.begins);
    }
  }
}
