// LocalBackwardScope: backward passes a rank runs on its own.
//
// Contract:
// - While one lives on a thread, a backward run on that thread notifies no backward
//   observer (Engine::add_observer): no Reducer counts it, joins an agreement for it or
//   averages a gradient of it; nor do its optimizer steps count as the thread's
//   (optim::steps_taken_on_this_thread). A rank may then train or evaluate something alone
//   (rank 0 training FID's feature network for the cache) while a data-parallel model lives
//   in the process. Scopes nest; each ends on the thread that made it.
// - Outside one, every backward notifies every observer, including backwards that reach
//   none of a Reducer's parameters: a Reducer counts those too, so that ranks running
//   different backwards are caught, and names them when the ranks diverge (reducer.h).
#pragma once

namespace tandem {

class LocalBackwardScope {
 public:
  LocalBackwardScope();
  ~LocalBackwardScope();
  LocalBackwardScope(const LocalBackwardScope&) = delete;
  LocalBackwardScope& operator=(const LocalBackwardScope&) = delete;

  // Whether the calling thread is inside one.
  static bool active();
};

}  // namespace tandem
