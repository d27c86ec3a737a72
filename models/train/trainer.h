// The training loop of tandem-train.
//
// Contract: train(options, world, out) trains options.model data-parallel over `world`
// from iteration 0, or with options.resume from the newest readable checkpoint in rank 0's
// options.out, to options.iters. Before the first collective that depends on a setting,
// the ranks compare their settings (run_settings.h, settings_agreement.h): a difference is
// an Error on every rank naming each differing flag, its values and ranks. Resuming, rank
// 0 chooses (checkpointer.h, scan_for_resume and choose_resume): a damaged checkpoint (header
// or data) newer than the newest readable one stops every rank with an Error naming it and
// what is damaged, unless options.resume_skip_damaged, when rank 0 prints to stderr a warning
// for each file it passes over, naming it and why; when checkpoints exist but none can be
// read, every rank stops with an Error listing them unless options.resume_allow_fresh. Every rank
// loads rank 0's choice: a rank that cannot is an Error naming the file (rank 0's also
// names the checkpoint before it, to move the file aside; nothing falls back on its own),
// as is a checkpoint written with another value of a setting it keeps, or one beyond
// options.iters. Rank 0 prints a progress line every log_every
// iterations (iteration/total, it/s, ETA, D and G losses averaged over ranks, and so the
// penalties' values and wgan-gp's Wasserstein estimate when they apply, the learning rate
// the iteration used under --lr-schedule, the norms before clipping under --clip-grad; bytes
// synchronised per step, each rank's resident set size in MB: `rss_mb`) to `out`,
// appends the same as one JSON object per line to <out>/metrics.jsonl (each iteration
// once: a resumed run first drops the lines after its checkpoint), writes sample
// pictures (<out>/samples-<iter>.png, drawn from an exponential moving average of G's
// weights unless --ema-decay 0) and checkpoints
// (<out>/ckpt-<iter>.safetensors: model, both optimizers, the average, the iteration;
// written atomically), and keeps <out>/report.html (models/training/run_report.h) up to date: rewritten
// after each log point and sample picture while running, and once more, "finished", at the
// end (a report that cannot be written is a warning; training goes on).
// Data and noise of iteration i on rank r are rank r's rows of the global batch of iteration
// i, which depends only on (seed, i) and the global batch (batch_maker.h), and so does its
// learning rate (--lr-schedule: set before each iteration from the iteration alone), so a
// resumed run continues exactly as an uninterrupted one would. With --global-batch B each
// rank takes B / world size rows (for_world_size; an Error naming B and the world size when
// it does not divide) and a checkpoint resumes at another world size: the same global
// batches, the updates equal within float32 reduction-order noise (bitwise at the same size). --accumulate k
// steps every k-th iteration and at the last (initialize_count_status), so a resume must start at a multiple
// of k (--ckpt-every is one). Errors (missing data, data too small for --batch on this many ranks, bad
// checkpoint, unwritable --out, an --out another run holds) are tandem::Errors naming the file or flag,
// thrown on every rank before training starts (an --trace file rank 0 cannot write too). Rank 0 locks --out
// for the whole call (out_dir.h). With options.trace, every rank records the step timeline from the first
// iteration (runtime/trace.h: a "step" span per iteration, "data" inside it), rank 0 writes
// it, every rank's, to that file at the end and prints one summary line per phase
// (trace_summary.h) and "trace: FILE" to `out`.
// gan_config(options) and wrapped_gan_options(options) are the model and the wrapping that
// train() builds from the flags, and sync_batch_norms(options, model, world) is what it does
// for --sync-bn: converts every batch norm of the model to SyncBatchNorm over `world`
// (reducer/sync_batch_norm.h) and returns how many (0 without --sync-bn), before wrapping
// (exposed for tests that drive them on chosen batches).
// With options.cuda_graphs each iteration's step goes through GraphedGanStep
// (graphed_gan_step.h): the same results, eager, captured or replayed; rank 0 writes its
// capture and discard lines to `out`.
// train() is the step and the extensions it registers with training::Manager
// (models/training/manager.h), which counts the iterations and runs them after each step:
// the learning rate, ADA's p, the checkpoint, the log point, the samples and the report page
// (run_extensions.h), and, unless options.accumulate > 1, a stop on SIGTERM or SIGUSR1
// (training::stop_on_signal): every rank ends at the iteration the signal arrived in, with
// its checkpoint, and train() returns normally (TrainResult::iterations counts those done).
// Each piece beside it states its part: out_dir, batch_maker,
// checkpointer, sample_writer, rank_stats, step_timer, metrics_log.
#pragma once

#include <memory>
#include <ostream>
#include <vector>

#include "models/gan.h"
#include "models/train/train_options.h"
#include "models/wrapped_gan.h"
#include "runtime/dist/process_group.h"
#include "runtime/tensor.h"

namespace tandem::models {

struct TrainResult {
  int64_t start_iteration = 0;
  int64_t iterations = 0;    // run by this call
  double seconds = 0.0;      // of the training loop
  double ms_per_step = 0.0;  // median over logged intervals after the first
  int ring8_modes = -1;      // ring8 only
  double ring8_high_quality = -1.0;
  std::vector<Tensor> parameters;  // final values, registration order
};

GanConfig gan_config(const TrainOptions& options);
WrappedGanOptions wrapped_gan_options(const TrainOptions& options);
int sync_batch_norms(const TrainOptions& options, GanModel& model,
                     const std::shared_ptr<dist::ProcessGroup>& world);

TrainResult train(const TrainOptions& options, const std::shared_ptr<dist::ProcessGroup>& world,
                  std::ostream& out);

}  // namespace tandem::models
