// The run around a training loop, as pytorch-pfn-extras' ExtensionsManager and MMEngine's
// Runner shape it: the manager owns the iteration counter and the run's state, resumes it,
// and runs extensions (logging, progress, checkpoints, schedules, stops) on triggers. The
// user's loop is the step:
//
//   training::Manager manager(world, {.iterations = 2000, .global_batch = 128, .out = "runs/x",
//                                  .name = "x", .resume = resume});
//   manager.state().add_module("gan", *gan);             // what a checkpoint holds
//   manager.extend(training::log_report(), training::every(50));
//   manager.extend(training::snapshot(), training::every(500));
//   manager.start();                                     // resumes; prepares the extensions
//   while (manager.running()) {
//     const int64_t it = manager.iteration();
//     ... one step ...
//     manager.end_iteration([&] { return training::Scalars{{"loss", loss.item()}}; });
//   }
//   manager.finish();
//
// Contract:
// - Counters: iteration() is the iterations done (the next one's index); kimg() is
//   iteration() x global_batch / 1000 (the images shown, in thousands, over all ranks; 0
//   when global_batch is 0); epoch() and batch_in_epoch() split iteration() by
//   iterations_per_epoch (an Error when that is 0).
// - Triggers (Trigger below): every(n) fires after iterations n, 2n, ...; every_kimg(k)
//   after the iteration in which the images shown cross a multiple of k x 1000 (integer
//   arithmetic on images: no rounding drift); each() after every iteration; end() only at
//   the run's last iteration. Every trigger but never() also fires at the last iteration
//   unless made with at_end = false. The last iteration is iterations - 1, or the one a
//   stop ended the run at (see stops below): a checkpoint every N also saves the stopped run.
// - extend(extension[, trigger[, name]]) registers before start() (an Error after; without a
//   trigger, the extension's default_trigger(): each() unless it says otherwise). At each
//   iteration's end the extensions whose trigger fires run in priority order (schedules
//   first, so that a checkpoint holds the next iteration's values; then checkpoints, the
//   run's record; then evaluations, whose values the reports may log; then the rest), in
//   registration order within a priority. Every rank runs
//   the same extensions at the same iterations (triggers depend on the counters alone), so
//   an extension may be collective.
// - start() is collective. With resume, rank 0 picks the newest checkpoint
//   "<out>/<name>-<iteration>.safetensors" whose checksum holds (older ones are tried in
//   turn; each one passed over is named in a warning on stderr), every rank loads it into
//   state() (Checkpoint::load: every rank or none), and iteration() is its iteration; rank
//   0 prints "resumed from <path> at iteration <i>". No sound checkpoint: a fresh run from
//   0 ("no checkpoint in <out>; starting from iteration 0"). A checkpoint beyond
//   iterations is an Error naming it. Then each extension's initialize() runs.
//   start(first_iteration) is start() for a program that resumed its state itself (tandem-
//   train's Checkpointer, with its own metadata checks): nothing is read, iteration() is
//   first_iteration (0 <= first_iteration <= iterations, an Error otherwise, as is
//   ManagerOptions::resume set), then the extensions' initialize() runs. Not collective
//   itself.
// - end_iteration(observe) counts one iteration, agrees on a stop (below), and runs the
//   extensions due. observe, when given, returns this iteration's scalars on this rank;
//   it is called at most once, and only when a running extension reads observation(), so a
//   loop whose values live on a GPU reads them only at log points. It must not be
//   collective (only some ranks may call it: the progress line reads it on rank 0).
//   report(name, value) appends to it (an evaluation's value, logged by a log_report that
//   runs after it at the same iteration).
// - Stops: an extension whose stops() is true (stop_on_signal, time_budget) may call
//   request_stop(reason) on its rank. When any is registered, end_iteration runs them, then
//   one allreduce of a flag over the ranks (host_group), so that every rank ends the run at
//   the same iteration, whichever rank was asked; rank 0 prints "stopping at iteration <i>:
//   <reason>". stopped() is then true and running() false once the extensions have run.
// - finish() runs each extension's finalize() (in priority order), then a barrier: rank 0's
//   files are complete before any rank returns.
// - out() is where rank 0 prints (std::cout by default); other ranks get nullptr. print(line)
//   writes a line there (nothing elsewhere), each extension's before_print() first, so that
//   an open progress line is cleared rather than written over; the manager's own lines and
//   the stock extensions' go through it.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/training/checkpoint.h"
#include "models/training/scalar_log.h"
#include "runtime/dist/process_group.h"

namespace tandem::training {

class Manager;

// When an extension runs (see the contract above).
struct Trigger {
  enum class Unit { iterations, kimg, never };
  Unit unit = Unit::iterations;
  int64_t every = 1;  // iterations, or images (kimg x 1000) for Unit::kimg
  bool at_end = true;

  // Whether it fires after the iteration that brought the count to `done` (images: done x
  // global_batch), `last` when that iteration is the run's last.
  bool fires(int64_t done, int64_t global_batch, bool last) const;
};

Trigger every(int64_t iterations, bool at_end = true);
Trigger every_kimg(double kimg, bool at_end = true);
Trigger each();
Trigger end();
Trigger never();

// Where an extension runs among those due at one iteration (lower first).
enum class Priority { schedule = 0, checkpoint = 1, evaluation = 2, report = 3 };

// One piece of the run's bookkeeping. Every member but run() has a default.
class Extension {
 public:
  virtual ~Extension() = default;
  // A name for messages ("log_report"); extend() may give another.
  virtual std::string default_name() const = 0;
  virtual Priority priority() const { return Priority::report; }
  // The trigger extend() gives it when the caller names none.
  virtual Trigger default_trigger() const { return training::each(); }
  // True for an extension that may call Manager::request_stop.
  virtual bool stops() const { return false; }
  // Once, at the end of start(), after a resume: iteration() is the first iteration.
  virtual void initialize(Manager& /*manager*/) {}
  // After an iteration its trigger fires at (iteration() is the iterations done).
  virtual void run(Manager& manager) = 0;
  // Once, in finish().
  virtual void finalize(Manager& /*manager*/) {}
  // Before Manager::print writes a line on rank 0 (the progress line clears itself).
  virtual void before_print() {}
};

struct ManagerOptions {
  int64_t iterations = 0;            // the run's length: a resumed run goes on to it
  int64_t global_batch = 0;          // images per iteration over all ranks (kimg; 0: none)
  int64_t iterations_per_epoch = 0;  // epoch(), batch_in_epoch() (0: none)
  std::string out;                   // the run's folder
  std::string name = "checkpoint";   // checkpoints <out>/<name>-<iteration>.safetensors
  bool resume = false;
  std::ostream* log = nullptr;  // rank 0's messages (nullptr: std::cout)
};

class Manager {
 public:
  Manager(std::shared_ptr<dist::ProcessGroup> world, ManagerOptions options);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // What a checkpoint holds: register modules, optimizers, schedulers, EMA, RNG streams and
  // the user's tensors here before start().
  Checkpoint& state() { return state_; }
  void extend(std::shared_ptr<Extension> extension, std::optional<Trigger> trigger = std::nullopt,
              std::string name = "");
  // A user extension: `fn` runs when `trigger` fires.
  void extend(std::function<void(Manager&)> fn, Trigger trigger, std::string name = "lambda");

  void start();
  void start(int64_t first_iteration);
  bool running() const { return started_ && !finished_; }
  void end_iteration(const std::function<Scalars()>& observe = {});
  void finish();

  int64_t iteration() const { return iteration_; }
  int64_t iterations() const { return options_.iterations; }
  double kimg() const;
  int64_t epoch() const;
  int64_t batch_in_epoch() const;
  // Whether the iteration that just ended is the run's last (in an extension's run()).
  bool last() const { return last_; }
  const ManagerOptions& options() const { return options_; }

  // This iteration's scalars (observe's result, read once, then what report() added).
  const Scalars& observation();
  // Adds a value to this iteration's observation (an evaluation's result, for the log).
  void report(const std::string& name, double value);
  // Asks, on this rank, that the run end after this iteration (see stops above).
  void request_stop(const std::string& reason);
  bool stopped() const { return stopped_; }
  const std::string& stop_reason() const { return stop_reason_; }

  dist::ProcessGroup& world() { return *world_; }
  bool is_rank0() const { return world_->rank() == 0; }
  std::ostream* out() const;
  // On rank 0: `line` and a newline on out(), after every extension's before_print().
  void print(const std::string& line);
  std::string checkpoint_path(int64_t iteration) const;

 private:
  struct Entry {
    std::shared_ptr<Extension> extension;
    Trigger trigger;
    std::string name;
  };
  void begin(std::optional<int64_t> first_iteration);
  int64_t resume();
  void agree_on_stop();

  std::shared_ptr<dist::ProcessGroup> world_;
  ManagerOptions options_;
  Checkpoint state_;
  std::vector<Entry> entries_;
  bool started_ = false, finished_ = false, finalized_ = false, last_ = false;
  bool has_stops_ = false;  // some extension may ask for a stop: agree on it each iteration
  int64_t iteration_ = 0;
  const std::function<Scalars()>* observe_ = nullptr;
  std::optional<Scalars> observation_;
  bool stop_asked_ = false, stopped_ = false;
  std::string stop_reason_, asked_reason_;
};

}  // namespace tandem::training
