// penalty_bench: what a gradient penalty costs. A critic (D) update of the mlp GAN in three
// kinds, one process against the whole-model DDP wrapper, side by side in one mpirun job:
//
//   mpirun -np 2 --oversubscribe build/bin/penalty_bench [--steps 50] [--runs 3] [--warmup 5]
//       [--batch 64] [--json FILE]
//
//   plain    the non-saturating D loss on D(real) and D(fake)
//   wgan-gp  the Wasserstein critic loss plus 10 x the WGAN-GP penalty on interpolates
//            (a third D forward, an inner grad with create_graph, the norm)
//   r1       the non-saturating D loss plus 5 x R1 on the reals (inner grad of D(real))
// Modes: single (the model unwrapped on every rank, no communication) and ddp (whole-model
// DistributedDataParallel). Fakes come from G under no-grad, so only D's work is timed.
// Phases of a step, each the mean over the timed steps, maximum over ranks:
//   forward   D's forwards and the loss (plus the interpolates)
//   inner     the penalty: grad(D(x), x, create_graph) and its norm
//   backward  the one backward the Reducer synchronises (for the penalties: through the
//             second-order graph), including the wait for the last bucket
//   optim     Adam on D's parameters
// step = run wall time / steps (max over ranks, median over runs); bwd/plain and
// step/plain compare with the plain kind of the same mode. Checks (exit 1): losses finite,
// D's parameters bitwise identical on every rank after the ddp runs.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "bench/bench_common.h"
#include "bench/bench_harness.h"
#include "models/gan.h"
#include "models/gradient_penalty.h"
#include "reducer/ddp.h"
#include "runtime/command_line.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/process_group.h"
#include "runtime/rng.h"

using namespace tandem;

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kKinds = {"plain", "wgan-gp", "r1"};
const std::vector<std::string> kModes = {"single", "ddp"};
constexpr double kGpLambda = 10.0;
constexpr double kR1Gamma = 10.0;

struct Options {
  int steps = 50;
  int runs = 3;
  int warmup = 5;
  int64_t batch = 64;
  std::string json;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Phases {
  double forward = 0, inner = 0, backward = 0, optim = 0;  // seconds, summed over steps
};

// One kind of D step under one mode: its own model, optimizer and (ddp) wrapper.
struct Setup {
  std::string kind;
  std::shared_ptr<models::GanModel> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::Adam> adam;
  Generator gen;
  Phases phases;

  Setup(std::string kind_, const std::string& mode, std::shared_ptr<dist::ProcessGroup> group, int rank)
      : kind(std::move(kind_)), gen(4321 + static_cast<uint64_t>(rank)) {
    models::GanConfig config;
    config.model = "mlp";
    config.seed = 7;
    model = models::make_gan(config);
    if (mode == "ddp") ddp = std::make_unique<DistributedDataParallel>(model, std::move(group));
    adam = std::make_unique<optim::Adam>(model->discriminator->parameters(),
                                         optim::AdamOptions{.lr = 1e-4, .betas = {0.0, 0.9}});
  }

  // One D update; returns the loss (local).
  double step(int64_t batch_size) {
    Tensor real_data = Tensor::empty({batch_size, 784});
    fill_uniform(real_data, -1.0, 1.0, gen);
    Tensor noise = Tensor::empty({batch_size, model->noise_dim()});
    fill_normal(noise, 0.0, 1.0, gen);
    Tensor fake;
    {
      NoGradGuard no_grad;
      fake = model->generate(Variable(noise)).data();
    }
    adam->zero_grad();

    auto t0 = Clock::now();
    Variable real(real_data, /*requires_grad=*/kind == "r1");
    Variable d_real = model->discriminate(real);
    Variable d_fake = model->discriminate(Variable(fake));
    Variable loss = kind == "wgan-gp" ? mean(d_fake) - mean(d_real)
                                      : add(mean(softplus(d_fake)), mean(softplus(-d_real)));
    Variable x_hat, d_hat;
    if (kind == "wgan-gp") {
      Tensor mix = Tensor::empty({batch_size});
      fill_uniform(mix, 0.0, 1.0, gen);
      x_hat = models::interpolate(real_data, fake, mix);
      d_hat = model->discriminate(x_hat);
    }
    auto t1 = Clock::now();
    phases.forward += std::chrono::duration<double>(t1 - t0).count();
    if (kind == "wgan-gp") loss = loss + kGpLambda * models::wgan_gp_penalty(d_hat, x_hat);
    if (kind == "r1") loss = loss + kR1Gamma / 2 * models::r1_penalty(d_real, real);
    auto t2 = Clock::now();
    phases.inner += std::chrono::duration<double>(t2 - t1).count();
    loss.backward();
    auto t3 = Clock::now();
    phases.backward += std::chrono::duration<double>(t3 - t2).count();
    adam->step();
    phases.optim += seconds_since(t3);
    return loss.item();
  }
};

struct Row {
  std::string mode, kind;
  double step_ms = 0, forward_ms = 0, inner_ms = 0, backward_ms = 0, optim_ms = 0;
  double bwd_ratio = 0, step_ratio = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CommandLine cl("penalty_bench",
                 "What a gradient penalty costs: the mlp GAN's D update plain, with WGAN-GP and with R1,\n"
                 "one process against whole-model DDP, runs interleaved in one mpirun job.");
  cl.add("--steps", &o.steps, "D updates per timed run", 1);
  cl.add("--runs", &o.runs, "timed runs per kind and mode; the median is reported", 1);
  cl.add("--warmup", &o.warmup, "untimed updates per kind and mode first", 0);
  cl.add("--batch", &o.batch, "batch per rank", 1);
  cl.add("--json", &o.json, "also write the results as JSON here", "FILE");
  cl.parse(argc, argv);
  std::vector<Row> rows;
  bench::Bench plugin{.name = "penalty_bench",
                      .backend = dist::Backend::mpi,
                      .wrong_label = "Wrong (non-finite losses, differing replica values)"};
  plugin.header = [&](const bench::World& world) {
    std::printf(
        "# penalty_bench: mlp GAN D update, %d ranks, batch %lld per rank, %d runs of %d updates after %d\n"
        "# warm-up; step = wall time / updates (max over ranks, median of runs); phases are means,\n"
        "# max over ranks. single = unwrapped on every rank at once; ratios against plain, same mode\n#\n",
        world.size, static_cast<long long>(o.batch), o.runs, o.steps, o.warmup);
    bench::print_columns({{6, "mode"},
                          {8, "kind"},
                          {8, "step", "(ms)"},
                          {8, "forward", "(ms)"},
                          {8, "inner", "(ms)"},
                          {8, "backward", "(ms)"},
                          {8, "optim", "(ms)"},
                          {9, "bwd/plain"},
                          {10, "step/plain"},
                          {7, "#wrong"}});
  };
  plugin.rows = [&](const bench::World& world) {
    int64_t total_wrong = 0;
    for (const std::string& mode : kModes) {
      std::vector<std::unique_ptr<Setup>> setups;
      for (const std::string& kind : kKinds)
        setups.push_back(std::make_unique<Setup>(kind, mode, world.group, world.rank));
      std::vector<bool> finite(setups.size(), true);
      std::vector<std::vector<double>> run_ms(setups.size());
      for (size_t k = 0; k < setups.size(); ++k) {
        for (int i = 0; i < o.warmup; ++i) finite[k] = finite[k] && std::isfinite(setups[k]->step(o.batch));
        setups[k]->phases = {};
      }
      // Runs interleaved (run 1 of every kind, then run 2, ...): drift hits every kind alike.
      for (int run = 0; run < o.runs; ++run) {
        for (size_t k = 0; k < setups.size(); ++k) {
          TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD));
          auto t0 = Clock::now();
          for (int s = 0; s < o.steps; ++s) finite[k] = finite[k] && std::isfinite(setups[k]->step(o.batch));
          run_ms[k].push_back(bench::max_over_ranks(1e3 * seconds_since(t0) / o.steps));
        }
      }
      const double timed = static_cast<double>(o.runs) * o.steps;
      size_t plain = 0;
      for (size_t k = 0; k < setups.size(); ++k) {
        const Phases& p = setups[k]->phases;
        Row r{mode, setups[k]->kind};
        r.step_ms = bench::median_of(run_ms[k]);
        r.forward_ms = bench::max_over_ranks(1e3 * p.forward / timed);
        r.inner_ms = bench::max_over_ranks(1e3 * p.inner / timed);
        r.backward_ms = bench::max_over_ranks(1e3 * p.backward / timed);
        r.optim_ms = bench::max_over_ranks(1e3 * p.optim / timed);
        if (r.kind == "plain") plain = rows.size();
        const Row& base = r.kind == "plain" ? r : rows[plain];
        r.bwd_ratio = r.backward_ms / base.backward_ms;
        r.step_ratio = r.step_ms / base.step_ms;
        rows.push_back(r);
        int64_t wrong = bench::sum_over_ranks(finite[k] ? 0 : 1);
        if (mode == "ddp") wrong += bench::replica_mismatches(*setups[k]->model->discriminator, *world.group);
        total_wrong += wrong;
        const Row& w = rows.back();
        if (world.root()) {
          std::printf("  %6s %8s %8.3f %8.3f %8.3f %8.3f %8.3f %9.2f %10.2f %7lld\n", w.mode.c_str(),
                      w.kind.c_str(), w.step_ms, w.forward_ms, w.inner_ms, w.backward_ms, w.optim_ms,
                      w.bwd_ratio, w.step_ratio, static_cast<long long>(wrong));
          std::fflush(stdout);
        }
      }
    }
    return total_wrong;
  };
  plugin.footer = [&](const bench::World& world, int64_t wrong) {
    if (o.json.empty()) return;
    std::ofstream js(o.json);
    js << "{\"ranks\": " << world.size << ", \"batch\": " << o.batch << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      js << (i ? ", " : "") << "{\"mode\": \"" << r.mode << "\", \"kind\": \"" << r.kind
         << "\", \"step_ms\": " << r.step_ms << ", \"forward_ms\": " << r.forward_ms
         << ", \"inner_ms\": " << r.inner_ms << ", \"backward_ms\": " << r.backward_ms
         << ", \"optim_ms\": " << r.optim_ms << ", \"bwd_ratio\": " << r.bwd_ratio
         << ", \"step_ratio\": " << r.step_ratio << "}";
    }
    js << "], \"wrong\": " << wrong << "}\n";
  };
  return bench::run_bench(plugin);
}
