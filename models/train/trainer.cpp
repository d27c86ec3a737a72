#include "models/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>

#include "autograd/lr_scheduler.h"
#include "kernels/conv_algorithm.h"
#include "models/adaptive_augment.h"
#include "models/gan.h"
#include "models/train/batch_maker.h"
#include "models/train/batch_prefetcher.h"
#include "models/train/checkpointer.h"
#include "models/train/fid_monitor.h"
#include "models/train/graphed_gan_step.h"
#include "models/train/metrics_log.h"
#include "models/train/nonfinite_guard.h"
#include "models/train/out_dir.h"
#include "models/train/run_extensions.h"
#include "models/train/run_settings.h"
#include "models/train/sample_writer.h"
#include "models/train/settings_agreement.h"
#include "models/train/step_timer.h"
#include "models/training/ema_weights.h"
#include "models/training/extensions.h"
#include "models/training/manager.h"
#include "models/wrapped_gan.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/trace_collect.h"
#include "runtime/host_cost.h"
#include "runtime/trace_json.h"
#include "runtime/trace_summary.h"

namespace tandem::models {

namespace {

using Clock = std::chrono::steady_clock;

// The state of `part`'s loss scale for the checkpoint (--precision fp16), else null.
std::vector<Tensor>* scaler_state(WrappedGan& wrapped, const std::string& part) {
  optim::LossScaler* scaler = wrapped.optim_wrappers()[part].loss_scaler();
  return scaler != nullptr ? &scaler->state() : nullptr;
}

// The group decides where tensors live: MPI reduces host tensors, NCCL its rank's GPU.
void check_device(DeviceKind device, const dist::ProcessGroup& world) {
  TANDEM_CHECK(
      world.tensor_device().kind == device,
      "--device " << to_string(device) << " with the " << dist::backend_name(world.backend())
                  << " backend: the mpi backend reduces CPU tensors and nccl CUDA tensors; use --device cuda "
                     "with --backend nccl (or auto), --device cpu with --backend mpi (or auto)");
}

// Rank 0 chooses the checkpoint; every rank resumes from that file, or fails naming it (a
// rank whose disk does not hold it must not train from elsewhere, or from scratch). Returns
// the iteration to start from.
// The first batch norm of `model` that normalises over each rank's batch alone ("" when none):
// with one, a run resumed at another rank count normalises over other batches than it did.
std::string per_rank_batch_norm(nn::Module& model, bool sync_bn) {
  if (sync_bn) return "";
  for (const auto& [name, module] : model.named_modules())
    if (dynamic_cast<nn::BatchNorm*>(module) != nullptr) return name;
  return "";
}

int64_t resume_iteration(const TrainOptions& o, const Checkpointer& checkpointer, dist::ProcessGroup& world,
                         const std::string& per_rank_norm, std::ostream& out) {
  const std::string& out_dir = o.out;
  const bool is_rank0 = world.rank() == 0;
  ResumeChoice choice;
  std::shared_ptr<const SafetensorsFile> loaded;  // rank 0: the chosen file, read while choosing
  if (is_rank0) {
    const std::vector<CheckpointFile> files = checkpointer.scan_for_resume();
    choice = choose_resume(files, out_dir, o.resume_allow_fresh, o.resume_skip_damaged);
    for (const CheckpointFile& file : files) {
      if (file.path == choice.path) loaded = file.loaded;
    }
    out.flush();
    for (const std::string& warning : choice.warnings) write_stderr_line("tandem-train: warning: " + warning);
  }
  const std::string refusal = dist::broadcast_string(world, choice.refusal, 0, "resume refusal");
  TANDEM_CHECK(refusal.empty(), (is_rank0 ? "" : "rank 0 cannot resume: ") << refusal);
  const std::string chosen = dist::broadcast_string(world, choice.path, 0, "resume checkpoint");
  if (chosen.empty()) {  // with unreadable files only under --resume-allow-fresh, which warned
    if (is_rank0 && choice.warnings.empty())
      out << "no checkpoint in " << out_dir << "; starting from iteration 0\n";
    return 0;
  }
  int64_t start = 0;
  try {
    start = checkpointer.load(chosen, loaded.get());
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);  // its message names the file: no second file:line
    const std::string why = error ? error->message() : e.what();
    TANDEM_CHECK(is_rank0,
                 "--resume: rank 0 resumes from " << chosen << ", which this rank cannot load: " << why);
    // No silent fall-back to an older checkpoint: the user decides, and is told how.
    const std::string older = choice.older.empty()
                                  ? ""
                                  : ". If " + chosen + " is damaged, move it out of " + out_dir +
                                        " to resume from the checkpoint before it, " + choice.older;
    TANDEM_FAIL("--resume: " << why << older);
  }
  TANDEM_CHECK(start <= o.iters, "--resume: " << chosen << " is at iteration " << start << ", beyond --iters "
                                              << o.iters << "; pass --iters " << start
                                              << " or more to continue that run");
  if (is_rank0) out << "resuming from " << chosen << " at iteration " << start << "\n";
  // An elastic resume changes what per-rank batch statistics are taken over: say so.
  std::string saved_world;
  if (is_rank0 && loaded) {
    const auto it = loaded->metadata.find("world_size");
    if (it != loaded->metadata.end()) saved_world = it->second;
  }
  if (!saved_world.empty() && saved_world != std::to_string(world.size()) && !per_rank_norm.empty()) {
    out.flush();
    write_stderr_line(
        "tandem-train: warning: " + chosen + " was written at " + saved_world + " rank(s), this run has " +
        std::to_string(world.size()) + ": the model's batch norm (" + per_rank_norm +
        ") normalises over each rank's batch without --sync-bn, so from here it sees batches of "
        "another size and the run departs from the one it continues (--sync-bn normalises over "
        "the global batch at any rank count)");
  }
  return start;
}

// Rank 0 writes the trace at the end: a path it cannot write is refused now, on every rank,
// before any training is lost.
void check_trace_path(const std::string& path, dist::ProcessGroup& world) {
  std::string refusal;
  if (world.rank() == 0) {
    try {
      trace::check_trace_file(path);  // a regular file gets a valid, empty trace until the run's
    } catch (const Error& e) {
      refusal = e.message();
    }
  }
  refusal = dist::broadcast_string(world, refusal, 0, "trace file check");
  TANDEM_CHECK(refusal.empty(), (world.rank() == 0 ? "" : "rank 0 cannot write the trace: ") << refusal);
}

// Rank 0's first line: what trains on what, and how it is wrapped.
void print_run_start(std::ostream& out, const TrainOptions& o, const GanModel& model, int size,
                     int synced_norms) {
  out << "tandem-train: " << model.type_name() << " on " << o.data << ", " << size << " rank(s), batch "
      << o.batch << " per rank (" << o.global_batch << " global), " << wrap_mode_name(o.wrap)
      << (o.explicit_prepare ? " + explicit prepare" : "") << " wrap, " << model.parameters().size()
      << " parameter tensors";
  if (o.sync_bn) out << ", " << synced_norms << " batch norm(s) synchronised over the ranks (--sync-bn)";
  if (o.precision != DType::f32) out << ", " << precision_summary(o);
  out << "\n";
}

// Every rank keeps the last `steps` steps of its timeline (0: all); rank 0 summarizes each
// step it drops into `dropped`, so that its summary lines cover the whole run.
void start_trace(int64_t steps, dist::ProcessGroup& world, std::vector<trace::PhaseSummary>& dropped) {
  trace::KeepLast keep{.steps = steps, .on_drop = {}};
  if (world.rank() == 0)
    keep.on_drop = [&dropped](const std::vector<trace::Event>& events) {
      trace::merge(dropped, trace::summarize(events));
    };
  dist::start_trace_aligned(world, std::move(keep));
}

// Every rank's kept timeline to `path` (rank 0 writes it), and rank 0's summary of each
// phase over the run's `steps`: the dropped steps' and the kept ones'.
void write_trace(const std::string& path, dist::ProcessGroup& world, std::vector<trace::PhaseSummary> phases,
                 int64_t steps, std::ostream& out) {
  const std::vector<trace::Event> events = dist::write_gathered_trace(world, path);
  if (world.rank() != 0) return;
  trace::merge(phases, trace::summarize(events));
  for (const trace::PhaseSummary& phase : phases) out << "rank 0 " << trace::summary_line(phase) << "\n";
  out << "trace: " << path << "\n";
  const trace::Retention kept = trace::retention();
  if (kept.steps < steps) {
    out << "trace: " << path << " holds the last " << kept.steps << " of the run's " << steps
        << " steps (--trace-steps); the summary lines above cover them all";
    if (kept.late_events > 0)
      out << " but " << kept.late_events << " spans that completed after their step was dropped";
    out << "\n";
  }
}

// Where a step's host time goes (tandem-train --trace): making and staging the batch, the
// training step's calls (the GPU's work is queued, except where the host waits for it), and
// the rest of the step block (EMA, bookkeeping), from the step block's start to its end.
struct HostSplit {
  double data_s = 0, step_s = 0, block_s = 0;
  int64_t steps = 0;
  void add(Clock::time_point begin, Clock::time_point data_done, Clock::time_point step_done,
           Clock::time_point end) {
    data_s += std::chrono::duration<double>(data_done - begin).count();
    step_s += std::chrono::duration<double>(step_done - data_done).count();
    block_s += std::chrono::duration<double>(end - begin).count();
    ++steps;
  }
  std::string line() const {
    const double n = static_cast<double>(std::max<int64_t>(steps, 1)) / 1000.0;
    char text[256];
    std::snprintf(text, sizeof text,
                  "host time per step (log points aside): %.3f ms, of which making and staging the batch "
                  "%.3f ms, the training step's calls %.3f ms, EMA and the rest %.3f ms",
                  block_s / n, data_s / n, step_s / n, (block_s - data_s - step_s) / n);
    return text;
  }
};

// The median over logged intervals, or the whole loop's mean when none was timed.
double ms_per_step(const StepTimer& timer, double seconds, int64_t iterations) {
  if (std::optional<double> median = timer.median_ms_per_step()) return *median;
  return iterations > 0 ? 1000.0 * seconds / static_cast<double>(iterations) : 0.0;
}

// Each Reducer's phases and caches, one line each.
void print_sync_summary(const WrappedGan& wrapped, std::ostream& out) {
  for (const Reducer* reducer : wrapped.reducers()) {
    const std::vector<PhaseStats> phases = reducer->stats();
    for (const PhaseStats& phase : phases) out << sync_phase_line(phase) << "\n";
    out << sync_buckets_line(phases.size(), reducer->bucket_bytes(), reducer->parameter_bytes()) << "\n";
  }
}

// Everything a run trains with, made from its options in order: --out locked (rank 0), the
// model on its device, the data, the settings agreed, the wrapper, EMA, ADA, the learning
// rate schedule and the checkpointer over them. Not movable: the checkpointer holds
// references to its members.
struct Run {
  Run(const TrainOptions& options, const std::shared_ptr<dist::ProcessGroup>& group, std::ostream& log)
      : o(for_world_size(options, group->size())),  // --global-batch: this world's share
        world(group),
        out(log),
        is_rank0(group->rank() == 0),
        device(group->tensor_device()),
        out_lock(open_out_dir(o, *world, out)),
        model(make_model(o, device)),
        // Made on the CPU; on a GPU the prefetcher uploads each one a step ahead from pinned memory.
        batches(make_batch_maker(o, world->size(), world->rank(), model->noise_dim(), Device::cpu(),
                                 model->data_shape(), is_rank0 ? &out : nullptr)),
        settings(run_settings(o, dist::backend_name(world->backend()), batches.data_identity())),
        synced_norms(agree_then_sync_norms(o, settings, *model, world)),
        wrapped(model, world, wrapped_gan_options(o)),
        ema(o.ema_kimg > 0 ? training::EmaWeights(model->generator->parameters(),
                                                  training::EmaHalfLife{.kimg = o.ema_kimg,
                                                                        .rampup = o.ema_rampup,
                                                                        .global_batch = o.global_batch})
                           : training::EmaWeights(model->generator->parameters(), o.ema_decay)),
        ada(make_augment(o, *model, world->rank(), world->size())),
        // The learning rate of iteration i is set before it (at the start, then after each iteration).
        scheduler({&wrapped.opt_g(), &wrapped.opt_d()}, o.lr_schedule),
        checkpointer(o.out,
                     {.world_size = world->size(), .elastic = options.global_batch > 0, .settings = settings},
                     {*model, wrapped.opt_g(), wrapped.opt_d(), ema.tensors(), &scheduler,
                      ada ? &ada->state() : nullptr, scaler_state(wrapped, "generator"),
                      scaler_state(wrapped, "discriminator")}) {
    if (o.cuda_graphs) graphed.emplace(wrapped, kDefaultGraphWarmup, is_rank0 ? &out : nullptr);
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // The checks that name a bad flag before --out is touched, then --out, ready for the run.
  static OutDirLock open_out_dir(const TrainOptions& o, dist::ProcessGroup& world, std::ostream& out) {
    check_device(o.device, world);
    // The convolutions' TANDEM_CUDNN setting is read here, so a bad value is named before the
    // output folder is touched rather than at the first GPU convolution (CPU runs ignore it).
    kernels::conv_algorithm_mode();
    const OutReuse reuse = o.resume      ? OutReuse::resume
                           : o.overwrite ? OutReuse::overwrite
                                         : OutReuse::new_run;
    return prepare_out_dir(o.out, reuse, world, out);  // held by rank 0 for the whole run
  }
  static std::shared_ptr<GanModel> make_model(const TrainOptions& o, Device device) {
    std::shared_ptr<GanModel> model = make_gan(gan_config(o));
    model->to(device);  // before the wrapper and optimizers take their handles
    // Losses stay on the device until a log point (or the progress line) reads them: a GPU
    // step that read them would wait for the device twice per step (GanModel::defer_log_reads).
    model->defer_log_reads = true;
    return model;
  }
  // Before the first collective whose order depends on a setting (the wrapper's checks).
  static int agree_then_sync_norms(const TrainOptions& o, const std::vector<RunSetting>& settings,
                                   GanModel& model, const std::shared_ptr<dist::ProcessGroup>& world) {
    check_settings_agree(*world, settings);
    return sync_batch_norms(o, model, world);
  }
  // --augment: the model's DiffAugment; with --augment-target, the adaptive p that drives it.
  static std::optional<AdaptiveAugment> make_augment(const TrainOptions& o, GanModel& model, int rank,
                                                     int size) {
    if (!o.augment.any()) return std::nullopt;
    model.augment = std::make_shared<DiffAugment>(o.augment, o.seed, rank, size);
    std::optional<AdaptiveAugment> ada;
    if (o.augment_target > 0) {
      const double step = ada_step(o.global_batch, o.augment_kimg);
      TANDEM_CHECK(step > 0 && std::isfinite(step),
                   "--augment-kimg " << o.augment_kimg << " at --global-batch " << o.global_batch
                                     << " moves p by " << step
                                     << " per adjustment: pass a value that moves it (StyleGAN2-ADA: 500)");
      ada.emplace(o.augment_target, step);
    }
    model.augment->track_real_signs = ada.has_value();
    return ada;
  }

  const TrainOptions o;
  const std::shared_ptr<dist::ProcessGroup> world;
  std::ostream& out;
  const bool is_rank0;
  const Device device;
  const OutDirLock out_lock;
  const std::shared_ptr<GanModel> model;
  const BatchMaker batches;
  const std::vector<RunSetting> settings;
  const int synced_norms;
  WrappedGan wrapped;
  training::EmaWeights ema;
  std::optional<AdaptiveAugment> ada;  // --augment-target
  optim::LrScheduler scheduler;
  const Checkpointer checkpointer;
  std::optional<GraphedGanStep> graphed;  // --cuda-graphs
};

// The training step of one iteration: its batch (prefetched a step ahead), the wrapper's
// step (or the CUDA graph's), the non-finite bookkeeping, EMA; under --trace its spans and
// the host time it costs (runtime/host_cost.h), the first steps aside (their allocations,
// cuDNN's plans and the like are the warm-up's).
class TrainStep {
 public:
  TrainStep(Run& run, int64_t start)
      : run_(run),
        prefetcher_(run.batches, run.device),
        count_from_(start + std::min<int64_t>(5, (run.o.iters - start) / 4)) {
    const TrainOptions& o = run.o;
    if (o.on_nonfinite == OnNonFinite::skip || o.on_nonfinite == OnNonFinite::scrub)
      nonfinite_guard_.emplace(o.max_nonfinite_steps, to_string(o.on_nonfinite),
                               run.is_rank0 ? &run.out : nullptr);
  }

  StepRecord operator()(int64_t it) {
    const TrainOptions& o = run_.o;
    StepRecord record;
    const bool counted = !o.trace.empty() && it >= count_from_;
    if (counted) host_cost::set_counting(true);
    const auto t_begin = Clock::now();
    Clock::time_point t_data, t_step;
    {
      trace::begin_step(it);
      trace::Span step("train", "step");
      if (step.on()) step.set_args({trace::arg("iteration", it)});
      run_.model->set_iteration(it);
      std::optional<trace::Span> data(std::in_place, "train", "data");
      Batch batch = prefetcher_.take(it, it + 1 < o.iters ? it + 1 : -1);
      data.reset();
      t_data = Clock::now();
      if (run_.ada) run_.model->augment->set_p(run_.ada->p());
      const int64_t g_skipped = generator_skips();
      record.log = run_.graphed ? run_.graphed->step(batch, it) : run_.wrapped.train_step(batch);
      t_step = Clock::now();
      record.lr_used = run_.wrapped.opt_d().lr();
      count_nonfinite(it, record.log);
      log_loss_scales(record.log);
      // A skipped G step (an overflow of its loss scale, or --on-nonfinite skip) left G as it
      // was: its average holds too, rather than counting a step that was not taken.
      if (generator_skips() == g_skipped) run_.ema.update(it);
    }
    host_cost::set_counting(false);
    if (counted) host_split_.add(t_begin, t_data, t_step, Clock::now());
    return record;
  }

  int64_t count_from() const { return count_from_; }
  const HostSplit& host_split() const { return host_split_; }

 private:
  int64_t generator_skips() { return run_.wrapped.optim_wrappers()["generator"].skipped_steps(); }

  // --precision fp16: each part's loss scale and the steps it skipped, as the parts stand
  // after this iteration (the same on every rank).
  void log_loss_scales(LogVars& log) {
    for (const auto& [name, wrapper] : run_.wrapped.optim_wrappers().items()) {
      const optim::LossScaler* scaler = wrapper->loss_scaler();
      if (scaler == nullptr) continue;
      const std::string part = name == "generator" ? "g" : "d";
      log["scale_" + part] = scaler->scale();
      log["skipped_" + part] = static_cast<double>(scaler->skipped_steps());
    }
  }

  // --on-nonfinite scrub logs what it zeroed; skip and scrub count the events against
  // --max-nonfinite-steps (equal on every rank).
  void count_nonfinite(int64_t it, LogVars& log) {
    std::optional<WrappedGan::Scrubbed> scrubbed;
    if (run_.o.on_nonfinite == OnNonFinite::scrub) {
      scrubbed = run_.wrapped.scrubbed_elements();
      log["scrubbed_g"] = static_cast<double>(scrubbed->generator);
      log["scrubbed_d"] = static_cast<double>(scrubbed->discriminator);
    }
    if (!nonfinite_guard_) return;
    NonFiniteGuard::PartCounts nonfinite;
    for (const auto& [name, wrapper] : run_.wrapped.optim_wrappers().items()) {
      const int64_t events = !scrubbed             ? wrapper->skipped_steps()
                             : name == "generator" ? scrubbed->generator
                                                   : scrubbed->discriminator;
      nonfinite.push_back({name, events, wrapper->steps_attempted()});
    }
    nonfinite_guard_->observe(it + 1, nonfinite);
  }

  Run& run_;
  BatchPrefetcher prefetcher_;
  const int64_t count_from_;
  std::optional<NonFiniteGuard> nonfinite_guard_;  // --max-nonfinite-steps
  HostSplit host_split_;                           // printed with --trace
};

// --accumulate k: a run whose length is not a multiple of k steps on its last, partial
// group. Every checkpoint is written right after an optimizer step (at multiples of k,
// --ckpt-every being one, or at a run's last iteration, whose partial group has stepped), so
// a run extended from one counts its accumulations from there.
void count_accumulation_from(Run& run, int64_t start) {
  if (run.o.accumulate <= 1) return;
  for (const auto& [name, wrapper] : run.wrapped.optim_wrappers().items())
    wrapper->initialize_count_status(start, run.o.iters, /*after_step=*/true);
}

// Every N iterations (N > 0) and at the end; at the end alone for 0.
training::Trigger every_or_end(int64_t n) { return n > 0 ? training::every(n) : training::end(); }

// The run's end after the barrier: the trace and host time (--trace), the result, and rank
// 0's summary lines and final report. `end` is the iteration it ended at: --iters, or where
// a signal stopped it.
TrainResult finish_run(Run& run, int64_t start, int64_t end, const TrainStep& step, StepTimer& timer,
                       std::vector<trace::PhaseSummary> trace_dropped, RunFiles* files,
                       Clock::time_point loop_start) {
  const TrainOptions& o = run.o;
  std::ostream& out = run.out;
  if (!o.trace.empty()) {
    write_trace(o.trace, *run.world, std::move(trace_dropped), end - start, out);
    const host_cost::Record host = host_cost::stop();
    if (run.is_rank0)
      out << "rank 0 " << step.host_split().line() << "\n"
          << "rank 0 " << host_cost::per_step_table(host, std::max<int64_t>(end - step.count_from(), 1), "");
  }
  TrainResult result;
  result.start_iteration = start;
  result.seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();
  result.iterations = end - start;
  result.ms_per_step = ms_per_step(timer, result.seconds, result.iterations);
  if (files) {
    if (files->ring8) {
      result.ring8_modes = files->ring8->modes_covered;
      result.ring8_high_quality = files->ring8->high_quality_fraction;
      files->metrics.log_ring8(end, *files->ring8, out);
    }
    print_sync_summary(run.wrapped, out);
    out << "metrics: " << files->metrics.path() << "\n";
    files->write_report(run.wrapped, training::RunState::finished);
    if (!files->report.warned()) out << "report: " << files->report.path() << "\n";
  }
  for (const Variable& p : run.model->parameters()) result.parameters.push_back(p.data().to(Device::cpu()));
  return result;
}

}  // namespace

GanConfig gan_config(const TrainOptions& o) {
  GanConfig config;
  config.model = o.model;
  config.dynamic = o.dynamic;
  config.objective = {.loss = o.loss,
                      .gp_lambda = o.gp_lambda,
                      .n_critic = o.n_critic,
                      .r1_gamma = o.r1_gamma,
                      .r1_every = o.r1_every,
                      .r2_gamma = o.r2_gamma,
                      .pl_weight = o.pl_weight,
                      .pl_every = o.pl_every,
                      .pl_decay = o.pl_decay,
                      .pl_batch_shrink = o.pl_batch_shrink,
                      .scale_penalties = o.scale_penalties};
  config.pggan_stage_iters = pggan_stage_iters(o);
  config.seed = o.seed;
  config.channels = o.channels;
  config.width = o.width;
  if (o.model == "stylegan2") config.style_mixing = o.style_mixing;
  config.precision = o.precision;
  config.low_precision_res = o.low_precision_res;
  return config;
}

WrappedGanOptions wrapped_gan_options(const TrainOptions& o) {
  WrappedGanOptions options;
  options.wrap = o.wrap;
  options.explicit_prepare = o.explicit_prepare;
  options.lr = o.lr;
  options.betas = adam_betas(o.loss, o.model);
  options.lazy_r1_correction = o.lazy_r1_correction;
  options.ddp.reducer.bucket_cap_mb = o.bucket_cap_mb;
  options.ddp.check_replicas_every = o.check_replicas_every;
  options.ddp.reducer.detect_anomalous_params = o.detect_anomalous_params;
  options.accumulative_counts = static_cast<int>(o.accumulate);
  options.clip_grad = {
      .max_norm = o.clip_grad,
      .norm_type = o.clip_grad_type == ClipGradType::inf ? std::numeric_limits<double>::infinity() : 2.0};
  options.ddp.reducer.non_finite = o.on_nonfinite == OnNonFinite::skip    ? NonFinitePolicy::skip_step
                                   : o.on_nonfinite == OnNonFinite::stop  ? NonFinitePolicy::stop
                                   : o.on_nonfinite == OnNonFinite::scrub ? NonFinitePolicy::scrub
                                                                          : NonFinitePolicy::off;
  options.loss_scaling = o.precision == DType::f16;
  options.loss_scale_init = o.loss_scale_init;
  return options;
}

int sync_batch_norms(const TrainOptions& o, GanModel& model,
                     const std::shared_ptr<dist::ProcessGroup>& world) {
  return o.sync_bn ? nn::convert_sync_batchnorm(model, world) : 0;
}

TrainResult train(const TrainOptions& options, const std::shared_ptr<dist::ProcessGroup>& world,
                  std::ostream& out) {
  Run run(options, world, out);
  const TrainOptions& o = run.o;
  const int64_t start = o.resume ? resume_iteration(o, run.checkpointer, *world,
                                                    per_rank_batch_norm(*run.model, o.sync_bn), out)
                                 : 0;
  count_accumulation_from(run, start);
  if (!o.trace.empty()) check_trace_path(o.trace, *world);
  std::optional<RunFiles> files;  // rank 0 alone reports and writes files
  if (run.is_rank0) {
    files.emplace(o,
                  "tandem-train: " + run.model->type_name() + " on " + o.data + ", " +
                      std::to_string(world->size()) + " rank(s)",
                  run.settings, start);
    print_run_start(out, o, *run.model, world->size(), run.synced_norms);
  }
  const SampleWriter sample_writer(o.out, o.seed, *run.model, run.ema, run.device);

  // After each step, in this order: the schedules (the learning rate, ADA's p), the
  // checkpoint (it is the run), the log point, the checkpoint's path and the samples at the
  // end, the report page.
  StepRecord record;
  StepTimer timer;
  training::Manager manager(
      world, {.iterations = o.iters, .global_batch = o.global_batch, .out = o.out, .log = &out});
  const training::Trigger checkpoint_every = every_or_end(o.ckpt_every);
  manager.extend(training::lr_schedule(run.scheduler));
  if (run.ada) manager.extend(adaptive_p(*run.ada, *run.model, record, checkpoint_every));
  auto checkpoint = std::make_shared<CheckpointSave>(run.checkpointer);
  manager.extend(checkpoint, checkpoint_every);
  manager.extend(std::make_shared<LogPointReport>(LogPointParts{.options = o,
                                                                .model = *run.model,
                                                                .wrapped = run.wrapped,
                                                                .ema = run.ema,
                                                                .device = run.device,
                                                                .record = record,
                                                                .timer = timer,
                                                                .files = files ? &*files : nullptr,
                                                                .start = start},
                                                  *world, out));
  manager.extend(
      [&](training::Manager& m) {
        if (!checkpoint->latest().empty()) m.print("checkpoint: " + checkpoint->latest());
      },
      training::end(), "checkpoint_path");
  manager.extend(samples(sample_writer, files ? &*files : nullptr), every_or_end(o.sample_every));
  manager.extend(
      report_page(files ? &*files : nullptr, run.wrapped, o.log_every, every_or_end(o.sample_every)));
  // SIGTERM (Slurm, ahead of its kill) or SIGUSR1 (mpirun forwards it) ends the run at the
  // iteration's end, with the checkpoint of that iteration. Not inside an accumulation of
  // --accumulate k: its micro-batches are in no checkpoint.
  if (o.accumulate == 1) manager.extend(training::stop_on_signal());
  manager.start(start);

  const auto loop_start = Clock::now();
  std::vector<trace::PhaseSummary> trace_dropped;  // --trace: rank 0's summary of the steps it dropped
  if (!o.trace.empty()) start_trace(o.trace_steps, *world, trace_dropped);
  if (!o.trace.empty()) host_cost::start();
  host_cost::set_counting(false);
  TrainStep step(run, start);
  timer.start(loop_start, run.wrapped.total_bytes());
  while (manager.running()) {
    record = step(manager.iteration());
    timer.step();
    manager.end_iteration();
  }
  // Rank 0's final checkpoint is complete before any rank returns (a caller may resume).
  manager.finish();
  return finish_run(run, start, manager.iteration(), step, timer, std::move(trace_dropped),
                    files ? &*files : nullptr, loop_start);
}

}  // namespace tandem::models
