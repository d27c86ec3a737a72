// tandem-train's extensions of training::Manager (models/training/manager.h): what happens
// after each step besides the step itself, each registered by train() (trainer.cpp).
//
// Contract (`done` is the iterations done, `last` the run's last iteration; the files are
// rank 0's, RunFiles, null on other ranks):
// - StepRecord is what a step leaves for them: its LogVars (losses, possibly still on the
//   device: GanModel::defer_log_reads) and the learning rate it used.
// - adaptive_p(ada, model, record, checkpoint): logs "augment_p", feeds ADA the real
//   images' signs and ends its iteration (collective at its adjustments, and before a
//   checkpoint, when `checkpoint` fires: the checkpoint holds every rank's counts). Priority
//   schedule, trigger each().
// - CheckpointSave(checkpointer): rank 0 saves the checkpoint of `done` (Checkpointer::save:
//   atomic); latest() is its path. Priority checkpoint: before the log point's FID, which
//   may take minutes and may fail.
// - LogPointReport: at a log point (done % --log-every == 0, or last) the rank statistics
//   (collective: rank_stats.h), the interval's time (StepTimer), the FID when due
//   (FidMonitor, collective; after the interval, so that its time is not the steps'), then
//   on rank 0 the progress line and metrics.jsonl (MetricsLog), TensorBoard and the report's
//   chart point. Between log points, on a terminal, rank 0's latest losses on a line
//   rewritten in place (training::Progress), read from the device only when that line is
//   due. Trigger each(), priority report.
// - samples(writer, files): rank 0 writes the sample picture of `done` (SampleWriter), adds
//   it to the report and TensorBoard, keeps a ring8 run's quality, and at the end prints
//   "samples: <path>"; a picture that cannot be made or written is a warning on stderr and
//   training goes on.
// - report_page(files, wrapped, log_every, sample): rank 0 rewrites report.html after each
//   log point and each sample picture but the last (the run's end writes it "finished").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "models/adaptive_augment.h"
#include "models/gan.h"
#include "models/train/checkpointer.h"
#include "models/train/fid_monitor.h"
#include "models/train/metrics_log.h"
#include "models/train/run_settings.h"
#include "models/train/sample_writer.h"
#include "models/train/step_timer.h"
#include "models/train/train_options.h"
#include "models/training/ema_weights.h"
#include "models/training/manager.h"
#include "models/training/progress.h"
#include "models/training/run_report.h"
#if TANDEM_HAVE_TENSORBOARD
#include "models/training/tensorboard_writer.h"
#endif
#include "models/wrapped_gan.h"

namespace tandem::models {

#if TANDEM_HAVE_TENSORBOARD
using TensorBoard = training::TensorBoardWriter;
#else
// Never made: without Protobuf the options refuse --tensorboard.
struct TensorBoard {
  TensorBoard(const std::string& /*dir*/, int64_t /*resume_step*/) {}
  void add_scalars(int64_t /*step*/, const training::Scalars& /*scalars*/) {}
  void add_png_file(const std::string& /*tag*/, const std::string& /*path*/, int64_t /*step*/) {}
};
#endif

struct StepRecord {
  LogVars log;
  double lr_used = 0;
};

// Rank 0's record of the run: metrics.jsonl (cut back to `start` on resume), report.html
// (its history read back) and --tensorboard's events.
struct RunFiles {
  RunFiles(const TrainOptions& o, const std::string& title, std::vector<RunSetting> settings, int64_t start);
  // Rewrites report.html with each Reducer's phases as they stand (RunReport::write_or_warn).
  void write_report(const WrappedGan& wrapped, training::RunState state);

  MetricsLog metrics;
  training::RunReport report;
  std::optional<TensorBoard> tensorboard;
  std::optional<data::Ring8Quality> ring8;  // the last ring8 samples' quality
};

std::shared_ptr<training::Extension> adaptive_p(AdaptiveAugment& ada, GanModel& model, StepRecord& record,
                                                training::Trigger checkpoint);

class CheckpointSave : public training::Extension {
 public:
  explicit CheckpointSave(const Checkpointer& checkpointer) : checkpointer_(checkpointer) {}
  const std::string& latest() const { return latest_; }
  std::string default_name() const override { return "checkpoint"; }
  training::Priority priority() const override { return training::Priority::checkpoint; }
  void run(training::Manager& manager) override;

 private:
  const Checkpointer& checkpointer_;
  std::string latest_;
};

struct LogPointParts {
  const TrainOptions& options;
  GanModel& model;
  const WrappedGan& wrapped;
  const training::EmaWeights& ema;
  Device device;
  StepRecord& record;
  StepTimer& timer;
  RunFiles* files;  // rank 0's; null elsewhere
  int64_t start;    // the first iteration
};

class LogPointReport : public training::Extension {
 public:
  // Opens rank 0's progress line and the FID monitor (--fid-every), which prints there.
  LogPointReport(LogPointParts parts, dist::ProcessGroup& world, std::ostream& out);
  std::string default_name() const override { return "log_point"; }
  void run(training::Manager& manager) override;
  void before_print() override;

 private:
  LogPointParts parts_;
  std::ostream& out_;
  std::optional<training::Progress> progress_;  // rank 0, on a terminal
  std::optional<FidMonitor> fid_;
};

std::shared_ptr<training::Extension> samples(const SampleWriter& writer, RunFiles* files);
std::shared_ptr<training::Extension> report_page(RunFiles* files, const WrappedGan& wrapped,
                                                 int64_t log_every, training::Trigger sample);

}  // namespace tandem::models
