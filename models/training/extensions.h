// The stock extensions of training::Manager (manager.h): each small and usable alone.
//
// Contract (each runs when its trigger fires; "at the end" is the run's last iteration;
// registered without a trigger, snapshot, replica_check and sample_grid run at the end alone, the others
// after every iteration):
// - log_report({reduce, tensorboard}): logs observation() to <out>/metrics.jsonl as one
//   line per run (ScalarLog, scalar_log.h: opened at start(), cut to the resumed
//   iteration), averaged over the ranks with Reduce::mean (collective: every rank passes the
//   same names) or rank 0's with Reduce::none. With tensorboard a folder, rank 0 also writes
//   the values there (TensorBoardWriter, cut to the resumed step; an Error in a build
//   without Protobuf). latest() holds the last values logged (on every rank). attach(sink)
//   before start() sends them to another ScalarSink on rank 0.
//   With page (the default), rank 0 also keeps <out>/report.html (run_report.h, titled
//   `title`, by default the manager's name): the values logged charted, the history of
//   metrics.jsonl read back on resume, rewritten after each log and once more "finished" by
//   finish(), which then prints "report: <path>"; a page that cannot be written is one
//   warning on stderr and the run goes on. add_sample(i, path, last) puts a picture on it
//   (sample_grid's `report` option).
// - progress_bar(): rank 0's progress line (progress.h) from start() to finish(), updated
//   with observation() when the line is due (a terminal's line every 0.5 s; otherwise a
//   line every 10 s). Trigger: each() (it prints only when due).
// - snapshot({keep}): saves state() to checkpoint_path(iteration()) (Checkpoint::save:
//   rank 0 writes atomically, every rank returns once it has). keep > 0 then removes, on rank
//   0, the older "<name>-<iteration>.safetensors" of the folder beyond the newest `keep`
//   (regular files only; a link is left alone). At the end rank 0 prints
//   "checkpoint: <path>". Priority: checkpoint.
// - replica_check(ddp): ddp.check_replicas("after iteration <i>") (collective: an Error on
//   every rank naming the first tensor that differs); at the end rank 0 prints "replicas
//   bitwise equal on <n> ranks".
// - fid_report(evaluator, generate, {name, noise_shape}): the FID of generate's samples
//   (metrics/fid_evaluator.h: collective, the same value on every rank), added to the
//   iteration's observation as `name` (Manager::report) so that a log_report due at the same
//   iteration logs it, and printed by rank 0 (FidEvaluator::line). latest() is the last value.
//   Priority: evaluation. Make its trigger fire where log_report's does (a multiple of it)
//   for its values to reach metrics.jsonl.
// - sample_grid(images, {name, columns, report}): on rank 0, images() ([n, C, H, W] in [-1, 1], C 1
//   or 3, on any device; run without recording a graph) written as a grid of `columns` to
//   <out>/<name>-<iteration>.png (png_writer.h: through a temporary renamed over it, a link
//   at the name replaced, never written through); at the end rank 0 prints
//   "samples: <path>". A picture that cannot be made or written is a warning on stderr and
//   the run goes on. With report, the picture also goes on that log_report's page. Other
//   ranks do nothing (it is not collective). latest() is the last path.
// - lr_schedule(scheduler): scheduler.set_iteration(iteration()) at start() and after every
//   iteration, so that each iteration runs at its own rate and a checkpoint holds the next
//   one's. Trigger: each(). Priority: schedule.
// - hyper_schedule(value, apply): apply(value(kimg())) at start() and after every
//   iteration: any hyper-parameter as a function of the images shown (Adam's beta2, a
//   penalty's gamma, an EMA half-life, augmentation p: R3GAN schedules all of them). It
//   keeps no state: the value follows from the counter, so a resumed run has it right.
//   Trigger: each(). Priority: schedule.
// - time_budget({seconds, reserve_s, now}): asks for a stop when the time since start(),
//   plus the slowest iteration so far, plus reserve_s, would pass `seconds` (so the
//   extensions due at the stop, a checkpoint among them, run within it). Trigger: each().
// - stop_on_signal({signals}): from start() to finish() the signals (SIGTERM and SIGUSR1
//   by default) set a flag instead of ending the process; the next iteration's end asks
//   for a stop, "<SIGNAME> received". With a checkpoint every N, the stopped run saves its
//   last iteration and the program returns normally (exit status 0). finish() puts the
//   previous handlers back. How the signal arrives: Slurm's srun sends SIGTERM to every
//   task KillWait seconds (30 by default) before SIGKILL (or the one --signal names, when
//   it names); Open MPI's mpirun forwards SIGUSR1 to every rank but answers its own SIGTERM
//   by sending SIGTERM and, one second later (odls_base_sigkill_timeout), SIGKILL: signal
//   mpirun with SIGUSR1, or raise that timeout.
#pragma once

#include <chrono>
#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "models/metrics/fid_evaluator.h"
#include "models/training/manager.h"
#include "models/training/scalar_log.h"
#include "reducer/ddp.h"

namespace tandem::training {

struct LogReportOptions {
  Reduce reduce = Reduce::mean;
  std::string tensorboard;  // a folder for TensorBoard's event files ("": none)
  bool page = true;         // <out>/report.html
  std::string title;        // the page's ("": the manager's name)
};

class RunReport;
enum class RunState;

class LogReport : public Extension {
 public:
  explicit LogReport(LogReportOptions options = {});
  ~LogReport() override;
  void attach(ScalarSink& sink) { sinks_.push_back(&sink); }
  const Scalars& latest() const { return latest_; }
  void add_sample(int64_t iteration, const std::string& path, bool last);

  std::string default_name() const override { return "log_report"; }
  void initialize(Manager& manager) override;
  void run(Manager& manager) override;
  void finalize(Manager& manager) override;

 private:
  void write_page(RunState state);

  LogReportOptions options_;
  std::vector<ScalarSink*> sinks_;
  std::unique_ptr<ScalarLog> log_;
  std::unique_ptr<ScalarSink> tensorboard_;
  std::unique_ptr<RunReport> page_;  // rank 0, with options_.page
  Scalars latest_;
};
std::shared_ptr<LogReport> log_report(LogReportOptions options = {});

std::shared_ptr<Extension> progress_bar();

struct SnapshotOptions {
  int keep = 0;  // the newest checkpoints kept (0: all)
};
std::shared_ptr<Extension> snapshot(SnapshotOptions options = {});

std::shared_ptr<Extension> replica_check(DataParallelWrapper& ddp);

struct FidReportOptions {
  std::string name = "fid";
  Shape noise_shape;  // one row's noise, as generate takes it
};
class FidReport : public Extension {
 public:
  FidReport(metrics::FidEvaluator& evaluator, metrics::GenerateImages generate, FidReportOptions options);
  double latest() const { return latest_; }
  std::string default_name() const override { return options_.name; }
  Priority priority() const override { return Priority::evaluation; }
  void run(Manager& manager) override;

 private:
  metrics::FidEvaluator& evaluator_;
  metrics::GenerateImages generate_;
  FidReportOptions options_;
  double latest_ = 0;
};
std::shared_ptr<FidReport> fid_report(metrics::FidEvaluator& evaluator, metrics::GenerateImages generate,
                                      FidReportOptions options);

struct SampleGridOptions {
  std::string name = "samples";
  int64_t columns = 10;
  LogReport* report = nullptr;  // its page shows the pictures too
};
class SampleGrid : public Extension {
 public:
  SampleGrid(std::function<Tensor()> images, SampleGridOptions options);
  const std::string& latest() const { return latest_; }
  std::string default_name() const override { return "sample_grid"; }
  Trigger default_trigger() const override;
  void run(Manager& manager) override;

 private:
  std::function<Tensor()> images_;
  SampleGridOptions options_;
  std::string latest_;
};
std::shared_ptr<SampleGrid> sample_grid(std::function<Tensor()> images, SampleGridOptions options = {});

std::shared_ptr<Extension> lr_schedule(optim::LrScheduler& scheduler);
std::shared_ptr<Extension> hyper_schedule(std::function<double(double kimg)> value,
                                          std::function<void(double)> apply);

struct TimeBudgetOptions {
  using Clock = std::chrono::steady_clock;
  double seconds = 0;
  double reserve_s = 0;  // kept free after the stop (a checkpoint's write, a job's epilogue)
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};
std::shared_ptr<Extension> time_budget(TimeBudgetOptions options);

struct StopOnSignalOptions {
  std::vector<int> signals = {SIGTERM, SIGUSR1};
};
std::shared_ptr<Extension> stop_on_signal(StopOnSignalOptions options = {});

}  // namespace tandem::training
