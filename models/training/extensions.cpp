#include "models/training/extensions.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <utility>

#include "autograd/grad_mode.h"
#include "models/data/png_writer.h"
#include "models/training/progress.h"
#include "models/training/run_report.h"
#if TANDEM_HAVE_TENSORBOARD
#include "models/training/tensorboard_writer.h"
#endif
#include "runtime/checkpoint.h"
#include "runtime/error.h"

namespace tandem::training {

namespace fs = std::filesystem;

// ---- log_report

LogReport::LogReport(LogReportOptions options) : options_(std::move(options)) {
#if !TANDEM_HAVE_TENSORBOARD
  TANDEM_CHECK(options_.tensorboard.empty(),
               "log_report: tensorboard folder "
                   << options_.tensorboard << ": this tandem was built without Protobuf (no TensorBoard)");
#endif
}

LogReport::~LogReport() = default;

void LogReport::initialize(Manager& manager) {
  log_ = std::make_unique<ScalarLog>(manager.options().out, &manager.world(), manager.iteration());
#if TANDEM_HAVE_TENSORBOARD
  if (manager.is_rank0() && !options_.tensorboard.empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard, manager.iteration());
    log_->attach(*tensorboard_);
  }
#endif
  for (ScalarSink* sink : sinks_) log_->attach(*sink);
  if (manager.is_rank0() && options_.page) {
    const std::string title = options_.title.empty() ? manager.options().name : options_.title;
    page_ = std::make_unique<RunReport>(manager.options().out, title, std::vector<ReportSetting>{},
                                        manager.iterations());
    if (manager.iteration() > 0) page_->load_history(manager.iteration());  // metrics.jsonl is cut by now
  }
}

void LogReport::run(Manager& manager) {
  latest_ = log_->log(manager.iteration(), manager.observation(), options_.reduce);
  if (!page_) return;
  page_->add_scalars(manager.iteration(), latest_);
  if (!manager.last()) write_page(RunState::running);  // finish() writes the last one
}

void LogReport::add_sample(int64_t iteration, const std::string& path, bool last) {
  if (!page_) return;
  page_->add_sample(iteration, path);
  if (!last) write_page(RunState::running);
}

void LogReport::finalize(Manager& manager) {
  if (!page_) return;
  write_page(RunState::finished);
  if (!page_->warned()) manager.print("report: " + page_->path());
}

void LogReport::write_page(RunState state) { page_->write_or_warn(state, "tandem: warning: no report page"); }

std::shared_ptr<LogReport> log_report(LogReportOptions options) {
  return std::make_shared<LogReport>(std::move(options));
}

namespace {

// ---- progress_bar

class ProgressBar : public Extension {
 public:
  std::string default_name() const override { return "progress_bar"; }
  void initialize(Manager& manager) override {
    if (std::ostream* out = manager.out())
      progress_.emplace(manager.iterations(), *out, ProgressOptions{.start = manager.iteration()});
  }
  void run(Manager& manager) override {
    if (progress_ && progress_->due(manager.iteration()))
      progress_->update(manager.iteration(), manager.observation());
  }
  void finalize(Manager& /*manager*/) override {
    if (progress_) progress_->finish();
  }
  void before_print() override {
    if (progress_) progress_->clear();
  }

 private:
  std::optional<Progress> progress_;
};

// ---- snapshot

class Snapshot : public Extension {
 public:
  explicit Snapshot(SnapshotOptions options) : options_(options) {
    TANDEM_CHECK(options_.keep >= 0, "snapshot: keep " << options_.keep << " is negative");
  }
  std::string default_name() const override { return "snapshot"; }
  Trigger default_trigger() const override { return end(); }
  Priority priority() const override { return Priority::checkpoint; }
  void run(Manager& manager) override {
    const std::string path = manager.checkpoint_path(manager.iteration());
    manager.state().save(path, manager.world());
    if (!manager.is_rank0()) return;
    if (options_.keep > 0) remove_older(manager);
    if (manager.last()) manager.print("checkpoint: " + path);
  }

 private:
  // The checkpoints beyond the newest `keep` (list_checkpoints); links are left alone.
  void remove_older(Manager& manager) const {
    std::error_code ec;
    int kept = 0;
    for (const auto& [iteration, path] : list_checkpoints(manager.options().out, manager.options().name)) {
      if (fs::is_symlink(path, ec) || kept++ < options_.keep) continue;
      if (!fs::remove(path, ec) && ec)
        write_stderr_line("tandem: warning: snapshot cannot remove " + path + ": " + ec.message());
    }
  }

  SnapshotOptions options_;
};

// ---- replica_check

class ReplicaCheck : public Extension {
 public:
  explicit ReplicaCheck(DataParallelWrapper& ddp) : ddp_(ddp) {}
  std::string default_name() const override { return "replica_check"; }
  Trigger default_trigger() const override { return end(); }
  void run(Manager& manager) override {
    ddp_.check_replicas("after iteration " + std::to_string(manager.iteration()));
    if (manager.last())
      manager.print("replicas bitwise equal on " + std::to_string(manager.world().size()) + " ranks");
  }

 private:
  DataParallelWrapper& ddp_;
};

// ---- lr_schedule, hyper_schedule

class Schedule : public Extension {
 public:
  Schedule(std::string name, std::function<void(const Manager&)> apply)
      : name_(std::move(name)), apply_(std::move(apply)) {}
  std::string default_name() const override { return name_; }
  Priority priority() const override { return Priority::schedule; }
  void initialize(Manager& manager) override { apply_(manager); }
  void run(Manager& manager) override { apply_(manager); }

 private:
  std::string name_;
  std::function<void(const Manager&)> apply_;
};

// ---- time_budget

class TimeBudget : public Extension {
 public:
  explicit TimeBudget(TimeBudgetOptions options) : options_(std::move(options)) {
    TANDEM_CHECK(options_.seconds > 0, "time_budget: " << options_.seconds << " s is not a budget");
    TANDEM_CHECK(options_.reserve_s >= 0, "time_budget: reserve " << options_.reserve_s << " s is negative");
  }
  std::string default_name() const override { return "time_budget"; }
  bool stops() const override { return true; }
  void initialize(Manager& /*manager*/) override { start_ = last_ = options_.now(); }
  void run(Manager& manager) override {
    const auto now = options_.now();
    slowest_s_ = std::max(slowest_s_, std::chrono::duration<double>(now - last_).count());
    last_ = now;
    const double spent = std::chrono::duration<double>(now - start_).count();
    if (spent + slowest_s_ + options_.reserve_s > options_.seconds) {
      char text[160];
      std::snprintf(text, sizeof text, "time budget of %g s (%.1f s spent, the slowest iteration %.2f s)",
                    options_.seconds, spent, slowest_s_);
      manager.request_stop(text);
    }
  }

 private:
  TimeBudgetOptions options_;
  TimeBudgetOptions::Clock::time_point start_, last_;
  double slowest_s_ = 0;
};

// ---- stop_on_signal

// The signal that arrived (0: none). Written by the handler, read by the extension.
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void record_stop_signal(int signal_number) { g_stop_signal = signal_number; }

class StopOnSignal : public Extension {
 public:
  explicit StopOnSignal(StopOnSignalOptions options) : options_(std::move(options)) {
    TANDEM_CHECK(!options_.signals.empty(), "stop_on_signal: no signal given");
  }
  ~StopOnSignal() override { restore(); }
  std::string default_name() const override { return "stop_on_signal"; }
  bool stops() const override { return true; }
  void initialize(Manager& /*manager*/) override {
    g_stop_signal = 0;
    for (int signal_number : options_.signals) {
      struct sigaction action {};
      action.sa_handler = record_stop_signal;
      sigemptyset(&action.sa_mask);
      action.sa_flags = SA_RESTART;  // a blocking call the signal interrupts carries on
      struct sigaction previous {};
      TANDEM_CHECK(sigaction(signal_number, &action, &previous) == 0,
                   "stop_on_signal: cannot handle signal " << signal_number << ": " << std::strerror(errno));
      previous_.emplace_back(signal_number, previous);
    }
  }
  void run(Manager& manager) override {
    if (const int signal_number = g_stop_signal; signal_number != 0) {
      const char* name = sigabbrev_np(signal_number);
      manager.request_stop(std::string("SIG") + (name != nullptr ? name : std::to_string(signal_number)) +
                           " received");
    }
  }
  void finalize(Manager& /*manager*/) override { restore(); }

 private:
  void restore() {
    for (const auto& [signal_number, previous] : previous_) sigaction(signal_number, &previous, nullptr);
    previous_.clear();
  }

  StopOnSignalOptions options_;
  std::vector<std::pair<int, struct sigaction>> previous_;
};

}  // namespace

FidReport::FidReport(metrics::FidEvaluator& evaluator, metrics::GenerateImages generate,
                     FidReportOptions options)
    : evaluator_(evaluator), generate_(std::move(generate)), options_(std::move(options)) {
  TANDEM_CHECK(generate_ != nullptr, "fid_report(" << options_.name << "): no generator function");
  TANDEM_CHECK(!options_.noise_shape.empty(), "fid_report(" << options_.name << "): no noise shape");
}

void FidReport::run(Manager& manager) {
  latest_ = evaluator_.evaluate(generate_, options_.noise_shape);
  manager.report(options_.name, latest_);
  if (std::ostream* out = manager.out())
    *out << evaluator_.line(options_.name, manager.iteration(), latest_) << "\n";
}

std::shared_ptr<FidReport> fid_report(metrics::FidEvaluator& evaluator, metrics::GenerateImages generate,
                                      FidReportOptions options) {
  return std::make_shared<FidReport>(evaluator, std::move(generate), std::move(options));
}

SampleGrid::SampleGrid(std::function<Tensor()> images, SampleGridOptions options)
    : images_(std::move(images)), options_(std::move(options)) {
  TANDEM_CHECK(images_ != nullptr, "sample_grid(" << options_.name << "): no image function");
  TANDEM_CHECK(options_.columns > 0,
               "sample_grid(" << options_.name << "): " << options_.columns << " columns");
}

Trigger SampleGrid::default_trigger() const { return end(); }

void SampleGrid::run(Manager& manager) {
  if (!manager.is_rank0()) return;
  char file[64];
  std::snprintf(file, sizeof file, "-%06lld.png", static_cast<long long>(manager.iteration()));
  const std::string path = (fs::path(manager.options().out) / (options_.name + file)).string();
  try {
    Tensor images;
    {
      NoGradGuard no_grad;
      images = images_().to(Device::cpu());
    }
    TANDEM_CHECK(images.dim() == 4 && (images.size(1) == 1 || images.size(1) == 3),
                 "the images are " << shape_str(images.shape()) << ", not [n, 1 or 3, height, width]");
    std::error_code ignored;  // a folder that cannot be made: the write names the file
    fs::create_directories(manager.options().out, ignored);
    if (images.size(1) == 1)
      data::write_png_gray_grid(path, images, options_.columns);
    else
      data::write_png_rgb_grid(path, images, options_.columns);
    latest_ = path;
    if (options_.report != nullptr) options_.report->add_sample(manager.iteration(), path, manager.last());
    if (manager.last()) manager.print("samples: " + path);
  } catch (const std::exception& e) {
    if (std::ostream* out = manager.out()) out->flush();
    write_stderr_line("tandem: warning: no sample picture at iteration " +
                      std::to_string(manager.iteration()) + ", training goes on: " + e.what());
  }
}

std::shared_ptr<SampleGrid> sample_grid(std::function<Tensor()> images, SampleGridOptions options) {
  return std::make_shared<SampleGrid>(std::move(images), std::move(options));
}

std::shared_ptr<Extension> progress_bar() { return std::make_shared<ProgressBar>(); }

std::shared_ptr<Extension> snapshot(SnapshotOptions options) { return std::make_shared<Snapshot>(options); }

std::shared_ptr<Extension> replica_check(DataParallelWrapper& ddp) {
  return std::make_shared<ReplicaCheck>(ddp);
}

std::shared_ptr<Extension> lr_schedule(optim::LrScheduler& scheduler) {
  return std::make_shared<Schedule>(
      "lr_schedule", [&scheduler](const Manager& manager) { scheduler.set_iteration(manager.iteration()); });
}

std::shared_ptr<Extension> hyper_schedule(std::function<double(double kimg)> value,
                                          std::function<void(double)> apply) {
  TANDEM_CHECK(value != nullptr && apply != nullptr,
               "hyper_schedule: a value function and a setter are needed");
  return std::make_shared<Schedule>(
      "hyper_schedule", [value = std::move(value), apply = std::move(apply)](const Manager& manager) {
        apply(value(manager.kimg()));
      });
}

std::shared_ptr<Extension> time_budget(TimeBudgetOptions options) {
  return std::make_shared<TimeBudget>(std::move(options));
}

std::shared_ptr<Extension> stop_on_signal(StopOnSignalOptions options) {
  return std::make_shared<StopOnSignal>(std::move(options));
}

}  // namespace tandem::training
