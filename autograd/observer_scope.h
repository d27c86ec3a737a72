// ThreadObserverScope: a thread with backward observers of its own.
//
// Contract:
// - Engine::add_observer / remove_observer and the observers a backward notifies use one
//   process-wide list, safe to use from several threads (a backward notifies the observers
//   registered when it began).
// - While a ThreadObserverScope lives on a thread, those calls made on that thread use a
//   list of the thread's own instead, empty at first: a backward run on the thread
//   notifies only the observers registered on it inside the scope, and backwards run
//   elsewhere never notify them. A thread that plays one rank of an in-process group
//   (dist::run_ranks) thus has its Reducer see its own rank's backwards only, as a process
//   would.
// - Remove an observer on the thread that added it, before the scope ends (the scope drops
//   any left). Scopes do not nest: a second one on the same thread throws.
#pragma once

#include <memory>

namespace tandem {

namespace detail {
struct ObserverList;
}  // namespace detail

class ThreadObserverScope {
 public:
  ThreadObserverScope();
  ~ThreadObserverScope();
  ThreadObserverScope(const ThreadObserverScope&) = delete;
  ThreadObserverScope& operator=(const ThreadObserverScope&) = delete;

 private:
  std::unique_ptr<detail::ObserverList> list_;
};

}  // namespace tandem
