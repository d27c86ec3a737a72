// step_bench: per-step time of a GAN training step, one process against the DDP wrappers.
//
//   mpirun -np 2 --oversubscribe build/bin/step_bench [--models mlp,mlp-dynamic,dcgan]
//       [--modes single,whole,whole_view,separate,prepare] [--steps 100] [--runs 3] [--warmup 10]
//       [--batch 64] [--json FILE] [--trace FILE]
//
// A step is GanModel::train_step: one D update then one G update (Adam 2e-4, betas 0.5,
// 0.999), on fresh random data drawn inside the step as the PyTorch anchor does (real
// uniform in [-1, 1] of the model's sample shape, noise N(0, 1)), batch --batch per rank.
// Modes, in one mpirun job, every rank running each mode at the same time (barriers around
// every run, runs of the modes interleaved), so "one process" is measured under the same
// load of one process per core:
//   single    the unwrapped model on every rank independently (no communication)
//   whole     DistributedDataParallel over the whole model
//   whole_view  the same with gradient_as_bucket_view (gradients stay views of the buckets,
//             so the averages are not copied back)
//   separate  SeparateDistributedDataParallel (one Reducer per part)
//   prepare   whole wrap + explicit reducer().prepare_for_backward(loss) before each backward
//   whole_traced  whole, with the step timeline recorded (runtime/trace.h) during its steps:
//             against whole (tracing compiled in but off), the cost of tracing. Rank 0
//             prints the trace summary of its steps (overlap, exposed communication per
//             phase); --trace FILE writes them, every rank's, as one Chrome trace.
// The time per step of a run is its wall time / --steps, the maximum over ranks; the
// table gives the median of --runs runs after --warmup steps. ratio = mode / single.
// The floor of a DDP mode: the same allreduces alone. For every phase its Reducers built
// (D step, G step, ...), that phase's buckets are allreduced through the same process group
// (all launched, then all waited, as the Reducer does; median of 15 after 3, max over
// ranks), weighted by the phase's share of the synced backwards per step. extra = mode - single, and
// extra/ar = extra / that allreduce time: 1.0 means the Reducer costs nothing beyond the
// communication itself (the target on 2 cores: <= 1.15). shm = the same buckets
// through the shared-memory reduction alone (reduced, and copied out as into gradients),
// which the Reducer uses on one host: what tandem's own communication costs.
// Checks (exit 1 on failure): losses finite, and after every DDP mode the parameters are
// bitwise identical on all ranks.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/optim.h"
#include "bench/bench_common.h"
#include "bench/bench_harness.h"
#include "models/gan.h"
#include "models/wrapped_gan.h"
#include "reducer/ddp.h"
#include "runtime/command_line.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/process_group.h"
#include "runtime/dist/shared_buffers.h"
#include "runtime/dist/trace_collect.h"
#include "runtime/rng.h"
#include "runtime/trace_summary.h"

using namespace tandem;

namespace {

using Clock = std::chrono::steady_clock;

const std::string kModes[] = {"single", "whole", "whole_view", "separate", "prepare", "whole_traced"};

struct Options {
  std::vector<std::string> models = {"mlp", "mlp-dynamic"};
  std::vector<std::string> modes{std::begin(kModes), std::end(kModes)};
  int steps = 100;
  int runs = 3;
  int warmup = 10;
  int64_t batch = 64;
  std::string json;
  std::string trace;
};

// One model under one mode, with its optimizers and wrapper.
struct Setup {
  std::shared_ptr<models::GanModel> model;
  std::unique_ptr<models::WrappedGan> wrapped;
  Generator gen;
  bool traced = false;

  Setup(const std::string& name, const std::string& mode, std::shared_ptr<dist::ProcessGroup> group, int rank)
      : gen(1234 + static_cast<uint64_t>(rank)) {
    models::GanConfig config;
    config.model = name == "mlp-dynamic" ? "mlp" : name;
    config.dynamic = name == "mlp-dynamic";
    config.seed = 7;
    model = models::make_gan(config);
    models::WrappedGanOptions options;
    options.wrap = mode == "single"     ? models::WrapMode::none
                   : mode == "separate" ? models::WrapMode::separate
                                        : models::WrapMode::whole;
    options.explicit_prepare = mode == "prepare";
    options.ddp.reducer.gradient_as_bucket_view = mode == "whole_view";
    wrapped = std::make_unique<models::WrappedGan>(model, group, options);
    traced = mode == "whole_traced";
  }

  // One training step at iteration `it`; returns loss_d + loss_g (local).
  double step(int64_t it, int64_t batch_size) {
    if (traced) trace::set_enabled(true);
    LogVars log;
    {
      trace::Span step("train", "step");
      if (step.on()) step.set_args({trace::arg("iteration", it)});
      model->set_iteration(it);
      Batch batch;
      {
        trace::Span data("train", "data");
        Shape shape = model->sample_shape();
        shape.insert(shape.begin(), batch_size);
        batch.inputs = Tensor::empty(shape);
        fill_uniform(batch.inputs, -1.0, 1.0, gen);
        batch.targets = Tensor::empty({batch_size, model->noise_dim()});
        fill_normal(batch.targets, 0.0, 1.0, gen);
      }
      log = wrapped->train_step(batch);
    }
    if (traced) trace::set_enabled(false);
    return log["loss_d"] + log["loss_g"];
  }
};

// Per step, the time of the allreduces a DDP mode's Reducers ran, alone: each cached
// phase's buckets allreduced together (launch all, wait all). A Reducer's synced backwards
// per step are shared among its phases in proportion to their backwards (a dynamic model's
// phases may have been evicted and rebuilt, so the counts of the cached ones are partial).
// Per step, the time of one phase's buckets reduced alone (`time_phase`: median ms over
// repetitions, max over ranks), weighted as the Reducers' synced backwards fall on their
// phases (a dynamic model's phases may have been evicted and rebuilt, so the counts of the
// cached ones are partial: each is taken in proportion).
template <typename TimePhase>
double floor_ms(const models::WrappedGan& wrapped, int64_t steps, TimePhase time_phase) {
  double per_step = 0;
  for (const Reducer* reducer : wrapped.reducers()) {
    const std::vector<PhaseStats> phases = reducer->stats();
    int64_t counted = 0;
    for (const PhaseStats& phase : phases) counted += phase.backwards;
    if (counted == 0) continue;
    const double backwards_per_step =
        static_cast<double>(reducer->synced_backwards()) / static_cast<double>(steps);
    for (const PhaseStats& phase : phases) {
      const double share = static_cast<double>(phase.backwards) / static_cast<double>(counted);
      per_step += time_phase(phase.bucket_bytes) * share * backwards_per_step;
    }
  }
  return per_step;
}

constexpr int kFloorWarmup = 3, kFloorReps = 15;

// The allreduces alone: each bucket through the group, all launched, then all waited.
double allreduce_floor_ms(const models::WrappedGan& wrapped, dist::ProcessGroup& group, int64_t steps) {
  return floor_ms(wrapped, steps, [&](const std::vector<size_t>& bucket_bytes) {
    std::vector<Tensor> buckets;
    for (size_t bytes : bucket_bytes)
      buckets.push_back(Tensor::ones({static_cast<int64_t>(bytes / sizeof(float))}));
    std::vector<double> ms;
    for (int rep = 0; rep < kFloorWarmup + kFloorReps; ++rep) {
      TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      auto t0 = Clock::now();
      std::vector<std::shared_ptr<dist::Work>> works;
      for (Tensor& b : buckets) works.push_back(group.allreduce(b, dist::ReduceOp::sum, "floor"));
      for (auto& w : works) w->wait();
      double local = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep >= kFloorWarmup) ms.push_back(bench::max_over_ranks(local));
    }
    return bench::median_of(ms);
  });
}

// The shared-memory reduction alone (dist/shared_buffers.h), as the Reducer runs it: each
// bucket published, this rank's slice summed, and every slice copied out into this rank's
// own memory (where the Reducer's gradients are). NaN where the ranks cannot share memory.
double shared_floor_ms(const models::WrappedGan& wrapped, dist::ProcessGroup& group, int64_t steps) {
  return floor_ms(wrapped, steps, [&](const std::vector<size_t>& bucket_bytes) {
    std::vector<std::unique_ptr<dist::SharedBuffers>> shared;
    std::vector<Tensor> out;
    for (size_t bytes : bucket_bytes) {
      const auto numel = static_cast<int64_t>(bytes / sizeof(float));
      shared.push_back(dist::SharedBuffers::create(group, numel, "shared floor"));
      if (!shared.back()) return std::nan("");
      Tensor mine = shared.back()->local();  // a handle: fills the shared buffer
      mine.fill_(1.0);
      out.push_back(Tensor::zeros({numel}));
    }
    std::vector<double> ms;
    for (int rep = 0; rep < kFloorWarmup + kFloorReps; ++rep) {
      const auto epoch = static_cast<uint64_t>(rep + 1);
      for (auto& s : shared) s->begin(epoch);
      TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
      auto t0 = Clock::now();
      for (auto& s : shared) s->publish(epoch);
      for (auto& s : shared) s->reduce(epoch);
      for (size_t k = 0; k < shared.size(); ++k) {
        dist::SharedBuffers& s = *shared[k];
        for (int q = 0; q < s.size(); ++q) {
          const auto [first, last] = s.slice(q);
          if (first == last) continue;
          const float* from = q == s.rank() ? s.local().data<float>() + first : s.reduced_slice(q, epoch);
          std::memcpy(out[k].data<float>() + first, from, static_cast<size_t>(last - first) * sizeof(float));
        }
        s.end(epoch);
      }
      double local = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
      if (rep >= kFloorWarmup) ms.push_back(bench::max_over_ranks(local));
    }
    return bench::median_of(ms);
  });
}

struct Result {
  std::string model;
  std::string mode;
  std::vector<double> run_ms;
  double median_ms = 0;
  double allreduce_ms = 0;  // DDP modes: the same allreduces alone, per step
  double shared_ms = 0;     // ... and the same buckets through the shared-memory reduction alone
  int64_t wrong = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> model_names = models::gan_model_names();
  model_names.push_back("mlp-dynamic");
  CommandLine cl("step_bench",
                 "Per-step time of a GAN training step, one process against the DDP wrappers, every mode\n"
                 "in one mpirun job with the runs interleaved; run it under mpirun.");
  cl.add_list("--models", &o.models, "GAN models (mlp-dynamic: mlp with its dynamic D layer)", model_names);
  cl.add_list("--modes", &o.modes, "how each model is wrapped", {std::begin(kModes), std::end(kModes)});
  cl.add("--steps", &o.steps, "training steps per timed run", 1);
  cl.add("--runs", &o.runs, "timed runs per mode; the median is reported", 1);
  cl.add("--warmup", &o.warmup, "untimed steps per mode first", 0);
  cl.add("--batch", &o.batch, "batch per rank", 1);
  cl.add("--json", &o.json, "also write the results as JSON here", "FILE");
  cl.add("--trace", &o.trace, "write the whole_traced mode's steps, every rank's, as a Chrome trace here",
         "FILE");
  cl.parse(argc, argv);
  std::vector<Result> results;
  int64_t total_wrong = 0;
  bench::Bench plugin{.name = "step_bench",
                      .backend = dist::Backend::mpi,
                      .wrong_label = "Wrong (non-finite losses, differing replica values)"};
  plugin.header = [&](const bench::World& world) {
    std::printf(
        "# step_bench: %d ranks, batch %lld per rank, %d runs of %d steps after %d warm-up steps;\n"
        "# per-step time = run wall time / steps, maximum over ranks, median over runs.\n"
        "# single = unwrapped model on every rank at once (no communication); ratio = mode / single\n#\n",
        world.size, static_cast<long long>(o.batch), o.runs, o.steps, o.warmup);
    bench::print_columns({{12, "model"},
                          {10, "mode"},
                          {10, "step", "(ms)"},
                          {26, "runs", "(ms)"},
                          {7, "ratio"},
                          {8, "extra", "(ms)"},
                          {8, "ar", "(ms)"},
                          {8, "extra/ar"},
                          {8, "shm", "(ms)"},
                          {7, "#wrong"}});
  };
  plugin.rows = [&](const bench::World& world) {
    dist::ProcessGroup& group = *world.group;
    dist::start_trace_aligned(group);  // time zero on every rank; recording only in whole_traced
    trace::stop();
    for (const auto& name : o.models) {
      // All four modes live side by side and their runs are interleaved (run 1 of every
      // mode, then run 2, ...), so drift on the shared machine affects every mode alike.
      std::vector<std::unique_ptr<Setup>> setups;
      std::vector<Result> rs;
      std::vector<int64_t> its;
      std::vector<bool> finite;
      const int64_t model_start_ns = trace::now_ns();
      for (const std::string& mode : o.modes) {
        setups.push_back(std::make_unique<Setup>(name, mode, world.group, world.rank));
        rs.push_back(Result{name, mode, {}, 0, 0});
        its.push_back(0);
        finite.push_back(true);
      }
      for (size_t m = 0; m < setups.size(); ++m) {
        for (int i = 0; i < o.warmup; ++i)
          finite[m] = finite[m] && std::isfinite(setups[m]->step(its[m]++, o.batch));
      }
      for (int run = 0; run < o.runs; ++run) {
        for (size_t m = 0; m < setups.size(); ++m) {
          TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
          auto t0 = Clock::now();
          for (int s = 0; s < o.steps; ++s)
            finite[m] = finite[m] && std::isfinite(setups[m]->step(its[m]++, o.batch));
          double ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count() / o.steps;
          rs[m].run_ms.push_back(bench::max_over_ranks(ms));
        }
      }
      double single_ms = 0;
      for (size_t m = 0; m < setups.size(); ++m) {
        Result& r = rs[m];
        r.median_ms = bench::median_of(r.run_ms);
        if (r.mode != "single") {
          r.allreduce_ms = allreduce_floor_ms(*setups[m]->wrapped, group, its[m]);
          r.shared_ms = shared_floor_ms(*setups[m]->wrapped, group, its[m]);
        }
        r.wrong = bench::sum_over_ranks(finite[m] ? 0 : 1);
        if (r.mode != "single") r.wrong += bench::replica_mismatches(*setups[m]->model, group);
        total_wrong += r.wrong;
        if (r.mode == "single") single_ms = r.median_ms;
        if (world.root()) {
          std::ostringstream runs;
          for (size_t i = 0; i < r.run_ms.size(); ++i) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%s%.2f", i ? " " : "", r.run_ms[i]);
            runs << buf;
          }
          const double extra = r.median_ms - single_ms;
          const bool ddp = r.mode != "single" && single_ms > 0;
          std::printf("  %12s %10s %10.2f %26s %7.2f %8.2f %8.2f %8.2f %8.2f %7lld\n", name.c_str(),
                      r.mode.c_str(), r.median_ms, runs.str().c_str(),
                      single_ms > 0 ? r.median_ms / single_ms : NAN, ddp ? extra : NAN,
                      ddp ? r.allreduce_ms : NAN, ddp && r.allreduce_ms > 0 ? extra / r.allreduce_ms : NAN,
                      ddp ? r.shared_ms : NAN, static_cast<long long>(r.wrong));
          std::fflush(stdout);
        }
        results.push_back(r);
      }
      if (world.root() && std::find(o.modes.begin(), o.modes.end(), "whole_traced") != o.modes.end()) {
        std::vector<trace::Event> events = trace::take_events();
        std::erase_if(events, [&](const trace::Event& e) { return e.ts_ns < model_start_ns; });
        for (const trace::PhaseSummary& phase : trace::summarize(events))
          std::printf("# %s whole_traced, rank 0 %s\n", name.c_str(), trace::summary_line(phase).c_str());
      }
    }
    if (!o.trace.empty()) {
      dist::write_gathered_trace(group, o.trace);
      if (world.root()) std::printf("# trace: %s\n", o.trace.c_str());
    }
    return total_wrong;
  };
  plugin.footer = [&](const bench::World& world, int64_t wrong) {
    if (o.json.empty()) return;
    std::ofstream js(o.json);
    js << "{\"ranks\": " << world.size << ", \"batch\": " << o.batch << ", \"steps\": " << o.steps
       << ", \"runs\": " << o.runs << ", \"results\": [";
    for (size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      js << (i ? ", " : "") << "{\"model\": \"" << r.model << "\", \"mode\": \"" << r.mode
         << "\", \"step_ms\": " << r.median_ms << ", \"allreduce_ms\": " << r.allreduce_ms
         << ", \"shared_ms\": " << r.shared_ms << ", \"runs_ms\": [";
      for (size_t k = 0; k < r.run_ms.size(); ++k) js << (k ? ", " : "") << r.run_ms[k];
      js << "]}";
    }
    js << "], \"wrong\": " << wrong << "}\n";
  };
  return bench::run_bench(plugin);
}
