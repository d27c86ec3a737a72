#include "models/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "autograd/ops.h"
#include "autograd/optim.h"
#include "models/data/dataset.h"
#include "models/gan.h"
#include "models/train/batch_maker.h"
#include "models/train/checkpointer.h"
#include "models/train/ema_weights.h"
#include "models/train/out_dir.h"
#include "models/train/rank_stats.h"
#include "models/train/sample_writer.h"
#include "models/train/step_timer.h"
#include "models/wrapped_gan.h"
#include "reducer/ddp.h"
#include "runtime/rng.h"

namespace tandem::models {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string format_duration(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  std::ostringstream os;
  if (s >= 3600) os << s / 3600 << "h";
  if (s >= 60) os << (s / 60) % 60 << "m";
  os << s % 60 << "s";
  return os.str();
}

std::string format_bytes(double bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(bytes >= 1e6 ? 2 : 1);
  if (bytes >= 1e6)
    os << bytes / 1e6 << " MB";
  else
    os << bytes / 1e3 << " kB";
  return os.str();
}

}  // namespace

TrainResult train(const TrainOptions& o, const std::shared_ptr<dist::ProcessGroup>& world,
                  std::ostream& out) {
  const int rank = world->rank(), size = world->size();
  // The group decides where tensors live: MPI reduces host tensors, NCCL its rank's GPU.
  const Device device = world->tensor_device();
  TANDEM_CHECK(
      device.is_cuda() == (o.device == "cuda"),
      "--device " << o.device << " with the " << dist::backend_name(world->backend())
                  << " backend: the mpi backend reduces CPU tensors and nccl CUDA tensors; use --device cuda "
                     "with --backend nccl (or auto), --device cpu with --backend mpi (or auto)");
  const bool is_rank0 = rank == 0;

  prepare_out_dir(o.out, *world);

  GanConfig config;
  config.model = o.model;
  config.dynamic = o.dynamic;
  config.loss = o.loss == "hinge" ? GanLoss::hinge : GanLoss::non_saturating;
  config.pggan_stage_iters =
      o.pggan_stage_iters > 0 ? o.pggan_stage_iters : std::max<int64_t>(1, o.iters / 3);
  config.seed = o.seed;
  std::shared_ptr<GanModel> model = make_gan(config);
  model->to(device);  // before the wrapper and optimizers take their handles

  const BatchMaker batches = make_batch_maker(o, size, rank, model->noise_dim(), device);

  WrappedGanOptions wrap_options;
  wrap_options.wrap = o.wrap;
  wrap_options.explicit_prepare = o.explicit_prepare;
  wrap_options.lr = o.lr;
  wrap_options.ddp.bucket_cap_mb = o.bucket_cap_mb;
  wrap_options.ddp.check_replicas_every = o.check_replicas_every;
  wrap_options.ddp.non_finite = o.on_nonfinite == "skip"   ? NonFinitePolicy::skip_step
                                : o.on_nonfinite == "stop" ? NonFinitePolicy::stop
                                                           : NonFinitePolicy::off;
  WrappedGan wrapped(model, world, wrap_options);
  EmaWeights ema(model->generator->parameters(), o.ema_decay);
  const Checkpointer checkpointer(o.out, {.world_size = size, .batch = o.batch, .seed = o.seed},
                                  {*model, wrapped.opt_g(), wrapped.opt_d(), ema.tensors()});
  int64_t start = 0;
  if (o.resume) {
    std::optional<std::string> latest = checkpointer.newest();
    if (latest) {
      start = checkpointer.load(*latest);
      if (is_rank0) out << "resuming from " << *latest << " at iteration " << start << "\n";
    } else if (is_rank0) {
      out << "no checkpoint in " << o.out << "; starting from iteration 0\n";
    }
  }

  std::ofstream metrics;
  if (is_rank0) {
    fs::path path = fs::path(o.out) / "metrics.jsonl";
    metrics.open(path, start > 0 ? std::ios::app : std::ios::trunc);
    TANDEM_CHECK(metrics.good(), "cannot open " << path.string() << " for writing");
    out << "tandem-train: " << model->type_name() << " on " << o.data << ", " << size << " rank(s), batch "
        << o.batch << " per rank, " << wrap_mode_name(o.wrap)
        << (o.explicit_prepare ? " + explicit prepare" : "") << " wrap, " << model->parameters().size()
        << " parameter tensors\n";
  }

  const SampleWriter sample_writer(o.out, o.seed, *model, ema, device);

  TrainResult result;
  result.start_iteration = start;
  const auto loop_start = Clock::now();
  StepTimer timer;
  timer.start(loop_start, wrapped.total_bytes());
  for (int64_t it = start; it < o.iters; ++it) {
    model->set_iteration(it);
    LogVars log = wrapped.train_step(batches.make(it));
    ema.update(it);
    timer.step();

    bool last = it + 1 == o.iters;
    if ((it + 1) % o.log_every == 0 || last) {
      const RankStats stats = gather_rank_stats(*world, log["loss_d"], log["loss_g"]);
      const double loss_d = stats.loss_d, loss_g = stats.loss_g;
      auto rss = [&](int r) { return stats.rss_mb[static_cast<size_t>(r)]; };
      const StepTimer::Interval interval = timer.finish(Clock::now(), wrapped.total_bytes());
      const double per_step_ms = interval.ms_per_step, bytes_per_step = interval.bytes_per_step;
      if (is_rank0) {
        double its = 1000.0 / per_step_ms;
        double eta = static_cast<double>(o.iters - it - 1) * per_step_ms / 1000.0;
        out << "iter " << std::setw(6) << it + 1 << "/" << o.iters << "  " << std::fixed
            << std::setprecision(1) << its << " it/s  " << per_step_ms << " ms/step  ETA "
            << format_duration(eta) << "  loss_d " << std::setprecision(4) << loss_d << "  loss_g " << loss_g
            << "  sync " << format_bytes(bytes_per_step) << "/step";
        if (!model->structure().empty()) out << "  [" << model->structure() << "]";
        if (wrapped.skipped_steps() > 0)
          out << "  skipped " << wrapped.skipped_steps() << " non-finite step(s)";
        out << "  rss " << std::setprecision(1);
        for (int r = 0; r < size; ++r) out << (r > 0 ? "/" : "") << rss(r);
        out << " MB" << std::endl;
        metrics << "{\"iteration\": " << it + 1 << ", \"loss_d\": " << loss_d << ", \"loss_g\": " << loss_g
                << ", \"ms_per_step\": " << per_step_ms
                << ", \"bytes_per_step\": " << static_cast<int64_t>(bytes_per_step) << ", \"rss_mb\": [";
        for (int r = 0; r < size; ++r) metrics << (r > 0 ? ", " : "") << rss(r);
        metrics << "]}" << std::endl;
      }
      timer.start(Clock::now(), wrapped.total_bytes());
    }
    if (is_rank0 && ((o.sample_every > 0 && (it + 1) % o.sample_every == 0) || last)) {
      Samples samples = sample_writer.write(it + 1);
      if (samples.ring8) {
        result.ring8_modes = samples.ring8->modes_covered;
        result.ring8_high_quality = samples.ring8->high_quality_fraction;
      }
      if (last) out << "samples: " << samples.path << "\n";
    }
    if (is_rank0 && ((o.ckpt_every > 0 && (it + 1) % o.ckpt_every == 0) || last)) {
      std::string path = checkpointer.save(it + 1);
      if (last) out << "checkpoint: " << path << "\n";
    }
  }
  // Rank 0's final checkpoint is complete before any rank returns (a caller may resume).
  world->barrier("end of training")->wait();
  result.seconds = std::chrono::duration<double>(Clock::now() - loop_start).count();
  result.iterations = o.iters - start;
  if (std::optional<double> median = timer.median_ms_per_step()) {
    result.ms_per_step = *median;
  } else if (result.iterations > 0) {
    result.ms_per_step = 1000.0 * result.seconds / static_cast<double>(result.iterations);
  }
  if (is_rank0 && result.ring8_modes >= 0) {
    out << "ring8 quality: " << result.ring8_modes << "/8 modes covered, " << std::fixed
        << std::setprecision(1) << 100.0 * result.ring8_high_quality
        << "% high-quality samples (within 3 sigma of a mode, 2500 samples)\n";
    metrics << "{\"iteration\": " << o.iters << ", \"ring8_modes\": " << result.ring8_modes
            << ", \"ring8_high_quality\": " << result.ring8_high_quality << "}" << std::endl;
  }
  if (is_rank0) {
    // One line per synchronisation phase: what each kind of backward cost.
    for (const Reducer* reducer : wrapped.reducers()) {
      for (const PhaseStats& phase : reducer->stats()) {
        size_t largest = 0;
        for (size_t b : phase.bucket_bytes) largest = std::max(largest, b);
        out << "sync " << phase.description << ": " << phase.bucket_bytes.size() << " bucket(s), largest "
            << format_bytes(static_cast<double>(largest)) << ", "
            << format_bytes(static_cast<double>(phase.bytes_per_backward)) << " per backward, "
            << phase.backwards << " backward(s), rebuilt " << phase.rebuilds << "x\n";
      }
    }
    out << "metrics: " << (fs::path(o.out) / "metrics.jsonl").string() << "\n";
  }
  for (const Variable& p : model->parameters()) result.parameters.push_back(p.data().to(Device::cpu()));
  return result;
}

}  // namespace tandem::models
