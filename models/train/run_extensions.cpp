#include "models/train/run_extensions.h"

#include <chrono>
#include <exception>
#include <utility>

#include "models/train/rank_stats.h"
#include "runtime/error.h"

namespace tandem::models {

namespace {

using Clock = std::chrono::steady_clock;

// A log point's terms besides the losses: the objective's, the same on every rank.
std::vector<std::pair<std::string, double>> logged_terms(const LogVars& log, bool scheduled, double lr_used) {
  std::vector<std::pair<std::string, double>> terms;
  if (scheduled) terms.emplace_back("lr", lr_used);
  for (const char* name :
       {"gp", "wdist", "r1", "r2", "pl", "pl_mean", "grad_norm_d", "grad_norm_g", "scrubbed_g", "scrubbed_d",
        "scale_g", "scale_d", "skipped_g", "skipped_d", "augment_p"}) {
    if (auto found = log.find(name); found != log.end()) terms.emplace_back(name, found->second);
  }
  return terms;
}

// The report's settings: the run's own, then where its files are.
std::vector<training::ReportSetting> report_settings(const TrainOptions& o,
                                                     const std::vector<RunSetting>& settings) {
  std::vector<training::ReportSetting> lines;
  for (const RunSetting& setting : settings) lines.push_back({.flag = setting.flag, .value = setting.value});
  lines.push_back({.flag = "--out", .value = o.out});
  lines.push_back({.flag = "--data-dir", .value = o.data_dir});
  return lines;
}

class AdaptiveP : public training::Extension {
 public:
  AdaptiveP(AdaptiveAugment& ada, GanModel& model, StepRecord& record, training::Trigger checkpoint)
      : ada_(ada), model_(model), record_(record), checkpoint_(checkpoint) {}
  std::string default_name() const override { return "adaptive_p"; }
  training::Priority priority() const override { return training::Priority::schedule; }
  void run(training::Manager& m) override {
    record_.log["augment_p"] = ada_.p();
    const auto [sign_sum, count] = model_.augment->take_real_signs();
    ada_.observe(sign_sum, count);
    const bool checkpoint = checkpoint_.fires(m.iteration(), m.options().global_batch, m.last());
    ada_.end_iteration(m.iteration(), checkpoint, m.world());
  }

 private:
  AdaptiveAugment& ada_;
  GanModel& model_;
  StepRecord& record_;
  training::Trigger checkpoint_;
};

class SamplePictures : public training::Extension {
 public:
  SamplePictures(const SampleWriter& writer, RunFiles* files) : writer_(writer), files_(files) {}
  std::string default_name() const override { return "samples"; }
  void run(training::Manager& m) override {
    if (files_ == nullptr) return;
    const int64_t done = m.iteration();
    try {
      const models::Samples samples = writer_.write(done);
      if (samples.ring8) files_->ring8 = samples.ring8;
      files_->report.add_sample(done, samples.path);
      if (files_->tensorboard) files_->tensorboard->add_png_file("samples", samples.path, done);
      if (m.last()) m.print("samples: " + samples.path);
    } catch (const std::exception& e) {
      if (std::ostream* out = m.out()) out->flush();
      write_stderr_line(std::string("tandem-train: warning: no sample picture at iteration ") +
                        std::to_string(done) + ", training goes on: " + e.what());
    }
  }

 private:
  const SampleWriter& writer_;
  RunFiles* files_;
};

class ReportPage : public training::Extension {
 public:
  ReportPage(RunFiles* files, const WrappedGan& wrapped, int64_t log_every, training::Trigger sample)
      : files_(files), wrapped_(wrapped), log_every_(log_every), sample_(sample) {}
  std::string default_name() const override { return "report_page"; }
  void run(training::Manager& m) override {
    const int64_t done = m.iteration();
    // After the picture, so that the page shows it; the last one is written at the end.
    if (files_ != nullptr && !m.last() &&
        (done % log_every_ == 0 || sample_.fires(done, m.options().global_batch, false)))
      files_->write_report(wrapped_, training::RunState::running);
  }

 private:
  RunFiles* files_;
  const WrappedGan& wrapped_;
  int64_t log_every_;
  training::Trigger sample_;
};

}  // namespace

RunFiles::RunFiles(const TrainOptions& o, const std::string& title, std::vector<RunSetting> settings,
                   int64_t start)
    : metrics(o.out, /*resume_iteration=*/start),
      report(o.out, title, report_settings(o, settings), o.iters) {
  if (!o.tensorboard.empty()) tensorboard.emplace(o.tensorboard, /*resume_step=*/start);
  if (start > 0) report.load_history(start);  // metrics.jsonl is cut to `start` by now
}

void RunFiles::write_report(const WrappedGan& wrapped, training::RunState state) {
  const std::vector<const Reducer*> reducers = wrapped.reducers();
  for (size_t r = 0; r < reducers.size(); ++r) {
    std::string label = std::to_string(r + 1);
    label.insert(0, 1, '#');
    report.set_phases(label, reducers[r]->stats());
  }
  report.write_or_warn(state, "tandem-train: warning: no run report");
}

std::shared_ptr<training::Extension> adaptive_p(AdaptiveAugment& ada, GanModel& model, StepRecord& record,
                                                training::Trigger checkpoint) {
  return std::make_shared<AdaptiveP>(ada, model, record, checkpoint);
}

void CheckpointSave::run(training::Manager& m) {
  latest_.clear();
  if (m.is_rank0()) latest_ = checkpointer_.save(m.iteration());
}

LogPointReport::LogPointReport(LogPointParts parts, dist::ProcessGroup& world, std::ostream& out)
    : parts_(parts), out_(out) {
  const bool is_rank0 = world.rank() == 0;
  if (is_rank0) {
    progress_.emplace(parts_.options.iters, out, training::ProgressOptions{.start = parts_.start});
    if (!progress_->in_place()) progress_.reset();
  }
  if (parts_.options.fid_every > 0)
    fid_.emplace(parts_.options, world, parts_.options.ema_decay > 0, is_rank0 ? &out : nullptr);
}

void LogPointReport::before_print() {
  if (progress_) progress_->clear();
}

void LogPointReport::run(training::Manager& m) {
  const TrainOptions& o = parts_.options;
  const int64_t done = m.iteration();
  const bool last = m.last();
  LogVars& log = parts_.record.log;
  const bool log_point = done % o.log_every == 0 || last;
  if (progress_ && log_point) progress_->clear();  // the log point's lines take its place
  if ((progress_ && !log_point && progress_->due(done)) || log_point) log = parts_.model.read_device_log(log);
  if (progress_ && !log_point)
    progress_->update(done, {{"loss_d", log["loss_d"]}, {"loss_g", log["loss_g"]}});
  if (!log_point) return;
  const bool scheduled = o.lr_schedule.str() != "constant";
  RankStats stats = gather_rank_stats(m.world(), log["loss_d"], log["loss_g"],
                                      logged_terms(log, scheduled, parts_.record.lr_used));
  const StepTimer::Interval interval = parts_.timer.finish(Clock::now(), parts_.wrapped.total_bytes());
  if (fid_ && fid_->due(done, last)) {  // after the interval: its time is not the steps'
    const double value = fid_->compute(parts_.model, parts_.ema, parts_.device);
    stats.terms.emplace_back(fid_->name(), value);
    if (m.is_rank0()) out_ << fid_->line(done, value) << "\n";
  }
  if (RunFiles* files = parts_.files) {
    const LogPoint point = {.iteration = done,
                            .total = o.iters,
                            .ms_per_step = interval.ms_per_step,
                            .loss_d = stats.loss_d,
                            .loss_g = stats.loss_g,
                            .terms = stats.terms,
                            .bytes_per_step = interval.bytes_per_step,
                            .structure = parts_.model.structure(),
                            .skipped_steps = parts_.wrapped.skipped_steps(),
                            .rss_mb = stats.rss_mb};
    files->metrics.log(point, out_);
    if (files->tensorboard) files->tensorboard->add_scalars(done, point_scalars(point));
    add_log_point(files->report, point);
  }
  parts_.timer.start(Clock::now(), parts_.wrapped.total_bytes());
}

std::shared_ptr<training::Extension> samples(const SampleWriter& writer, RunFiles* files) {
  return std::make_shared<SamplePictures>(writer, files);
}

std::shared_ptr<training::Extension> report_page(RunFiles* files, const WrappedGan& wrapped,
                                                 int64_t log_every, training::Trigger sample) {
  return std::make_shared<ReportPage>(files, wrapped, log_every, sample);
}

}  // namespace tandem::models
