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
#include "models/train/rank_stats.h"
#include "models/train/run_report.h"
#include "models/train/run_settings.h"
#include "models/train/sample_writer.h"
#include "models/train/settings_agreement.h"
#include "models/train/step_timer.h"
#include "models/training/ema_weights.h"
#include "models/training/progress.h"
#include "models/training/scalar_log.h"
#if TANDEM_HAVE_TENSORBOARD
#include "models/training/tensorboard_writer.h"
#endif
#include "models/wrapped_gan.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/trace_collect.h"
#include "runtime/host_cost.h"
#include "runtime/trace_json.h"
#include "runtime/trace_summary.h"

namespace tandem::models {

namespace {

using Clock = std::chrono::steady_clock;

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

// What TensorBoard plots of a log point: the numbers metrics.jsonl holds, but rss.
training::Scalars tensorboard_scalars(const LogPoint& point) {
  training::Scalars scalars = {{"loss_d", point.loss_d}, {"loss_g", point.loss_g}};
  scalars.insert(scalars.end(), point.terms.begin(), point.terms.end());
  scalars.emplace_back("ms_per_step", point.ms_per_step);
  scalars.emplace_back("bytes_per_step", point.bytes_per_step);
  return scalars;
}

// True at multiples of `every` (0: never) and at the last iteration.
bool due(int64_t done, int64_t every, bool last) { return (every > 0 && done % every == 0) || last; }

// The report's settings: the run's own, then where its files are.
std::vector<RunSetting> report_settings(const TrainOptions& o, std::vector<RunSetting> settings) {
  settings.push_back({.flag = "--out", .value = o.out});
  settings.push_back({.flag = "--data-dir", .value = o.data_dir});
  return settings;
}

// Rewrites the report with each Reducer's phases as they stand; a report that cannot be
// written is reported once, and the run goes on.
void write_report(RunReport& report, const WrappedGan& wrapped, RunState state, bool& warned) {
  const std::vector<const Reducer*> reducers = wrapped.reducers();
  for (size_t r = 0; r < reducers.size(); ++r) {
    std::string label = std::to_string(r + 1);
    label.insert(0, 1, '#');
    report.set_phases(label, reducers[r]->stats());
  }
  const std::string problem = report.write(state);
  if (!problem.empty() && !warned) {
    warned = true;
    write_stderr_line("tandem-train: warning: no run report: " + problem + "; training goes on");
  }
}

// Rank 0's first line: what trains on what, and how it is wrapped.
void print_run_start(std::ostream& out, const TrainOptions& o, const GanModel& model, int size,
                     int synced_norms) {
  out << "tandem-train: " << model.type_name() << " on " << o.data << ", " << size << " rank(s), batch "
      << o.batch << " per rank (" << o.global_batch << " global), " << wrap_mode_name(o.wrap)
      << (o.explicit_prepare ? " + explicit prepare" : "") << " wrap, " << model.parameters().size()
      << " parameter tensors";
  if (o.sync_bn) out << ", " << synced_norms << " batch norm(s) synchronised over the ranks (--sync-bn)";
  out << "\n";
}

// A log point's terms besides the losses: the objective's, the same on every rank.
std::vector<std::pair<std::string, double>> logged_terms(const LogVars& log, bool scheduled, double lr_used) {
  std::vector<std::pair<std::string, double>> terms;
  if (scheduled) terms.emplace_back("lr", lr_used);
  for (const char* name : {"gp", "wdist", "r1", "r2", "pl", "pl_mean", "grad_norm_d", "grad_norm_g",
                           "scrubbed_g", "scrubbed_d", "augment_p"}) {
    if (auto found = log.find(name); found != log.end()) terms.emplace_back(name, found->second);
  }
  return terms;
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
                      .pl_batch_shrink = o.pl_batch_shrink};
  config.pggan_stage_iters = pggan_stage_iters(o);
  config.seed = o.seed;
  config.channels = o.channels;
  config.width = o.width;
  if (o.model == "stylegan2") config.style_mixing = o.style_mixing;
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
  return options;
}

int sync_batch_norms(const TrainOptions& o, GanModel& model,
                     const std::shared_ptr<dist::ProcessGroup>& world) {
  return o.sync_bn ? nn::convert_sync_batchnorm(model, world) : 0;
}

TrainResult train(const TrainOptions& options, const std::shared_ptr<dist::ProcessGroup>& world,
                  std::ostream& out) {
  const int rank = world->rank(), size = world->size();
  const TrainOptions o = for_world_size(options, size);  // --global-batch: this world's share
  const bool is_rank0 = rank == 0;
  check_device(o.device, *world);
  // The convolutions' TANDEM_CUDNN setting is read here, so a bad value is named before the
  // output folder is touched rather than at the first GPU convolution (CPU runs ignore it).
  kernels::conv_algorithm_mode();
  const Device device = world->tensor_device();
  const OutReuse reuse = o.resume ? OutReuse::resume : o.overwrite ? OutReuse::overwrite : OutReuse::new_run;
  const OutDirLock out_lock = prepare_out_dir(o.out, reuse, *world, out);  // held by rank 0 for the whole run

  std::shared_ptr<GanModel> model = make_gan(gan_config(o));
  model->to(device);  // before the wrapper and optimizers take their handles
  // Losses stay on the device until a log point (or the progress line) reads them: a GPU
  // step that read them would wait for the device twice per step (GanModel::defer_log_reads).
  model->defer_log_reads = true;
  // Made on the CPU; on a GPU the prefetcher uploads each one a step ahead from pinned memory.
  const BatchMaker batches = make_batch_maker(o, size, rank, model->noise_dim(), Device::cpu(),
                                              model->data_shape(), is_rank0 ? &out : nullptr);
  // Before the first collective whose order depends on a setting (the wrapper's checks).
  const std::vector<RunSetting> settings =
      run_settings(o, dist::backend_name(world->backend()), batches.data_identity());
  check_settings_agree(*world, settings);
  const int synced_norms = sync_batch_norms(o, *model, world);
  WrappedGan wrapped(model, world, wrapped_gan_options(o));
  std::optional<GraphedGanStep> graphed;  // --cuda-graphs
  if (o.cuda_graphs) graphed.emplace(wrapped, kDefaultGraphWarmup, is_rank0 ? &out : nullptr);
  training::EmaWeights ema = o.ema_kimg > 0
                                 ? training::EmaWeights(model->generator->parameters(),
                                                        training::EmaHalfLife{.kimg = o.ema_kimg,
                                                                              .rampup = o.ema_rampup,
                                                                              .global_batch = o.global_batch})
                                 : training::EmaWeights(model->generator->parameters(), o.ema_decay);
  std::optional<AdaptiveAugment> ada;  // --augment-target
  if (o.augment.any()) {
    model->augment = std::make_shared<DiffAugment>(o.augment, o.seed, rank, size);
    if (o.augment_target > 0) {
      const double step = ada_step(o.global_batch, o.augment_kimg);
      TANDEM_CHECK(step > 0 && std::isfinite(step),
                   "--augment-kimg " << o.augment_kimg << " at --global-batch " << o.global_batch
                                     << " moves p by " << step
                                     << " per adjustment: pass a value that moves it (StyleGAN2-ADA: 500)");
      ada.emplace(o.augment_target, step);
    }
    model->augment->track_real_signs = ada.has_value();
  }
  // The learning rate of iteration i is set before it (at 0 here, then after each iteration).
  optim::LrScheduler scheduler({&wrapped.opt_g(), &wrapped.opt_d()}, o.lr_schedule);
  const Checkpointer checkpointer(
      o.out, {.world_size = size, .elastic = options.global_batch > 0, .settings = settings},
      {*model, wrapped.opt_g(), wrapped.opt_d(), ema.tensors(), &scheduler, ada ? &ada->state() : nullptr});

  const int64_t start =
      o.resume ? resume_iteration(o, checkpointer, *world, per_rank_batch_norm(*model, o.sync_bn), out) : 0;
  scheduler.set_iteration(start);
  // A run whose length is not a multiple of --accumulate steps on its last, partial group.
  // Every checkpoint is written right after an optimizer step (at multiples of the count,
  // --ckpt-every being one, or at a run's last iteration, whose partial group has stepped),
  // so a run extended from one counts its accumulations from there.
  if (o.accumulate > 1) {
    for (const auto& [name, wrapper] : wrapped.optim_wrappers().items())
      wrapper->initialize_count_status(start, o.iters, /*after_step=*/true);
  }
  const bool scheduled = o.lr_schedule.str() != "constant";
  if (!o.trace.empty()) check_trace_path(o.trace, *world);

  std::optional<MetricsLog> metrics;  // rank 0 alone reports and writes files
  std::optional<RunReport> report;
  std::optional<TensorBoard> tensorboard;  // --tensorboard
  bool report_warned = false;
  if (is_rank0) {
    metrics.emplace(o.out, /*resume_iteration=*/start);
    if (!o.tensorboard.empty()) tensorboard.emplace(o.tensorboard, /*resume_step=*/start);
    report.emplace(
        o.out,
        "tandem-train: " + model->type_name() + " on " + o.data + ", " + std::to_string(size) + " rank(s)",
        report_settings(o, settings), o.iters);
    if (start > 0) report->load_history(start);  // metrics.jsonl is cut to `start` by now
    print_run_start(out, o, *model, size, synced_norms);
  }
  const SampleWriter sample_writer(o.out, o.seed, *model, ema, device);
  // On a terminal, rank 0's latest losses on a line rewritten in place between the log
  // points; elsewhere (a file, a pipe) the log points' lines alone, as ever.
  std::optional<training::Progress> progress;
  if (is_rank0) {
    progress.emplace(o.iters, out, training::ProgressOptions{.start = start});
    if (!progress->in_place()) progress.reset();
  }

  std::optional<FidMonitor> fid;  // --fid-every
  if (o.fid_every > 0) fid.emplace(o, *world, o.ema_decay > 0, is_rank0 ? &out : nullptr);

  TrainResult result;
  result.start_iteration = start;
  std::optional<data::Ring8Quality> ring8;
  const auto loop_start = Clock::now();
  StepTimer timer;
  std::vector<trace::PhaseSummary> trace_dropped;  // --trace: rank 0's summary of the steps it dropped
  if (!o.trace.empty()) start_trace(o.trace_steps, *world, trace_dropped);
  // --trace also counts what the steps cost the host (runtime/host_cost.h), log points and
  // the first steps aside (their allocations, cuDNN's plans and the like are the warm-up's).
  if (!o.trace.empty()) host_cost::start();
  host_cost::set_counting(false);
  const int64_t count_from = start + std::min<int64_t>(5, (o.iters - start) / 4);
  std::optional<NonFiniteGuard> nonfinite_guard;  // --max-nonfinite-steps
  if (o.on_nonfinite == OnNonFinite::skip || o.on_nonfinite == OnNonFinite::scrub)
    nonfinite_guard.emplace(o.max_nonfinite_steps, to_string(o.on_nonfinite), is_rank0 ? &out : nullptr);
  BatchPrefetcher prefetcher(batches, device);
  HostSplit host_split;  // printed with --trace
  timer.start(loop_start, wrapped.total_bytes());
  for (int64_t it = start; it < o.iters; ++it) {
    LogVars log;
    double lr_used = 0;
    const bool counted = !o.trace.empty() && it >= count_from;
    if (counted) host_cost::set_counting(true);
    const auto t_begin = Clock::now();
    Clock::time_point t_data, t_step;
    {
      trace::begin_step(it);
      trace::Span step("train", "step");
      if (step.on()) step.set_args({trace::arg("iteration", it)});
      model->set_iteration(it);
      std::optional<trace::Span> data(std::in_place, "train", "data");
      Batch batch = prefetcher.take(it, it + 1 < o.iters ? it + 1 : -1);
      data.reset();
      t_data = Clock::now();
      if (ada) model->augment->set_p(ada->p());
      log = graphed ? graphed->step(batch, it) : wrapped.train_step(batch);
      t_step = Clock::now();
      lr_used = wrapped.opt_d().lr();
      NonFiniteGuard::PartCounts nonfinite;  // so far, equal on every rank
      std::optional<WrappedGan::Scrubbed> scrubbed;
      if (o.on_nonfinite == OnNonFinite::scrub) {
        scrubbed = wrapped.scrubbed_elements();
        log["scrubbed_g"] = static_cast<double>(scrubbed->generator);
        log["scrubbed_d"] = static_cast<double>(scrubbed->discriminator);
      }
      if (nonfinite_guard) {
        for (const auto& [name, wrapper] : wrapped.optim_wrappers().items()) {
          const int64_t events = !scrubbed             ? wrapper->skipped_steps()
                                 : name == "generator" ? scrubbed->generator
                                                       : scrubbed->discriminator;
          nonfinite.push_back({name, events, wrapper->steps_attempted()});
        }
        nonfinite_guard->observe(it + 1, nonfinite);
      }
      ema.update(it);
    }
    host_cost::set_counting(false);
    if (counted) host_split.add(t_begin, t_data, t_step, Clock::now());
    timer.step();

    const int64_t done = it + 1;
    scheduler.set_iteration(done);  // before a checkpoint: it holds the next iteration's rate
    const bool last = done == o.iters;
    if (ada) {  // p's update, and before a checkpoint every rank's counts in the state it saves
      log["augment_p"] = ada->p();
      const auto [sign_sum, count] = model->augment->take_real_signs();
      ada->observe(sign_sum, count);
      ada->end_iteration(done, due(done, o.ckpt_every, last), *world);
    }
    // The checkpoint first: it is the run. Before the log point's FID, which may take minutes
    // and may fail; a picture that cannot be written (a full disk, a directory in its place)
    // is reported below and costs only itself.
    std::string checkpoint_path;
    if (is_rank0 && due(done, o.ckpt_every, last)) checkpoint_path = checkpointer.save(done);
    const bool log_point = done % o.log_every == 0 || last;
    if (progress && log_point) progress->clear();  // the log point's lines take its place
    if ((progress && !log_point && progress->due(done)) || log_point) log = model->read_device_log(log);
    if (progress && !log_point)
      progress->update(done, {{"loss_d", log["loss_d"]}, {"loss_g", log["loss_g"]}});
    if (log_point) {
      RankStats stats =
          gather_rank_stats(*world, log["loss_d"], log["loss_g"], logged_terms(log, scheduled, lr_used));
      const StepTimer::Interval interval = timer.finish(Clock::now(), wrapped.total_bytes());
      if (fid && fid->due(done, last)) {  // after the interval: its time is not the steps'
        const double value = fid->compute(*model, ema, device);
        stats.terms.emplace_back(fid->name(), value);
        if (is_rank0) out << fid->line(done, value) << "\n";
      }
      if (metrics) {
        const LogPoint point = {.iteration = done,
                                .total = o.iters,
                                .ms_per_step = interval.ms_per_step,
                                .loss_d = stats.loss_d,
                                .loss_g = stats.loss_g,
                                .terms = stats.terms,
                                .bytes_per_step = interval.bytes_per_step,
                                .structure = model->structure(),
                                .skipped_steps = wrapped.skipped_steps(),
                                .rss_mb = stats.rss_mb};
        metrics->log(point, out);
        if (tensorboard) tensorboard->add_scalars(done, tensorboard_scalars(point));
        report->add_point(point);
      }
      timer.start(Clock::now(), wrapped.total_bytes());
    }
    if (last && !checkpoint_path.empty()) out << "checkpoint: " << checkpoint_path << "\n";
    if (is_rank0 && due(done, o.sample_every, last)) {
      try {
        Samples samples = sample_writer.write(done);
        if (samples.ring8) ring8 = samples.ring8;
        report->add_sample(done, samples.path);
        if (tensorboard) tensorboard->add_png_file("samples", samples.path, done);
        if (last) out << "samples: " << samples.path << "\n";
      } catch (const std::exception& e) {
        out.flush();
        write_stderr_line(std::string("tandem-train: warning: no sample picture at iteration ") +
                          std::to_string(done) + ", training goes on: " + e.what());
      }
    }
    // After the picture, so that the page shows it; the last one is written below.
    if (report && !last && (done % o.log_every == 0 || due(done, o.sample_every, false)))
      write_report(*report, wrapped, RunState::running, report_warned);
  }
  // Rank 0's final checkpoint is complete before any rank returns (a caller may resume).
  world->barrier("end of training")->wait();
  if (!o.trace.empty()) {
    write_trace(o.trace, *world, std::move(trace_dropped), o.iters - start, out);
    const host_cost::Record host = host_cost::stop();
    if (is_rank0)
      out << "rank 0 " << host_split.line() << "\n"
          << "rank 0 " << host_cost::per_step_table(host, o.iters - count_from, "");
  }

  result.seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();
  result.iterations = o.iters - start;
  result.ms_per_step = ms_per_step(timer, result.seconds, result.iterations);
  if (ring8) {
    result.ring8_modes = ring8->modes_covered;
    result.ring8_high_quality = ring8->high_quality_fraction;
  }
  if (metrics) {
    if (ring8) metrics->log_ring8(o.iters, *ring8, out);
    print_sync_summary(wrapped, out);
    out << "metrics: " << metrics->path() << "\n";
    write_report(*report, wrapped, RunState::finished, report_warned);
    if (!report_warned) out << "report: " << report->path() << "\n";
  }
  for (const Variable& p : model->parameters()) result.parameters.push_back(p.data().to(Device::cpu()));
  return result;
}

}  // namespace tandem::models
