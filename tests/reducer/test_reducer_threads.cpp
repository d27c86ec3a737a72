// The Reducer's logic at 1-4 thread ranks (dist::run_ranks), without mpirun: the
// single-process oracle in every MMGeneration style, the D step sending nothing for G,
// ranks whose backwards diverge, no_sync accumulation, and the one flat bucket storage under
// a LayerDrop model (a new used set nearly every backward). The multi-rank MPI suite
// (mpi/test_reducer.cpp) runs the same models over real processes.
// Catch2 assertions are not thread-safe: ranks record what they saw, the main thread checks.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "autograd/observer_scope.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "reducer/ddp.h"
#include "runtime/dist/thread_process_group.h"
#include "runtime/step_capture.h"
#include "tests/reducer/gan_fixture.h"
#include "tests/reducer/layer_drop_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr int kMaxRanks = 4;

// run_ranks, each rank with its own backward observers: its Reducer sees only its own
// rank's backwards, as it would in a process of its own.
void run_reducer_ranks(int size, const std::function<void(std::shared_ptr<dist::ProcessGroup>)>& fn) {
  dist::run_ranks(size, [&](std::shared_ptr<dist::ProcessGroup> group) {
    ThreadObserverScope scope;
    fn(std::move(group));
  });
}

size_t bytes_of(const std::vector<Variable>& params) {
  size_t bytes = 0;
  for (const Variable& p : params) bytes += p.data().bytes();
  return bytes;
}

}  // namespace

TEST_CASE("threads: GAN training in every MMGeneration style matches the single-process oracle",
          "[reducer][threads][oracle]") {
  for (bool dynamic : {false, true}) {
    const std::vector<Tensor> reference = train_gan(Style::none, dynamic, 6, nullptr);
    for (int n = 1; n <= kMaxRanks; ++n) {
      for (Style style : kDistributedStyles) {
        INFO((dynamic ? "dynamic" : "static")
             << " GAN, " << style_name(style) << ", " << n << " thread ranks");
        std::vector<std::vector<Tensor>> got(static_cast<size_t>(n));
        run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
          got[static_cast<size_t>(g->rank())] = train_gan(style, dynamic, 6, g);
        });
        require_close(got[0], reference, 1e-6);
        for (int r = 1; r < n; ++r) {
          INFO("replica of rank " << r);
          require_bitwise_equal(got[static_cast<size_t>(r)], got[0]);
        }
      }
    }
  }
}

TEST_CASE("threads: a D-step backward sends nothing for G and leaves G's gradients alone",
          "[reducer][threads][phases]") {
  struct Seen {
    size_t d_bytes = 0, g_bytes = 0;
    std::vector<size_t> d_step_bytes, g_step_bytes;
    bool g_grads_untouched = true;
    std::vector<PhaseStats> stats;
    bool buckets_within = false;
  };
  for (int n = 2; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<Seen> seen(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      Seen& s = seen[static_cast<size_t>(g->rank())];
      auto gan = std::make_shared<TinyGan>(3, /*dynamic=*/false);
      DistributedDataParallel ddp(gan, g);
      s.d_bytes =
          bytes_of(gan->discriminator->parameters()) - bytes_of(gan->discriminator->extra->parameters());
      s.g_bytes = bytes_of(gan->generator->parameters());
      for (int it = 0; it < 3; ++it) {
        Tensor z = slice_rows(random_tensor({kGlobalBatch, 4}, 40 + it), g->rank(), g->size());
        Tensor real = slice_rows(random_tensor({kGlobalBatch, 3}, 50 + it), g->rank(), g->size());
        Variable fake = gan->generator->forward(Variable(z));  // G's forward runs inside the D step
        // A gradient G already holds (from an earlier G step) must survive the D step.
        for (const Variable& p : gan->generator->parameters())
          Variable(p).set_grad(Tensor::full(p.shape(), 42.0));
        Variable loss_d = mean(softplus(gan->discriminator->run(fake.detach(), false))) +
                          mean(softplus(-gan->discriminator->run(Variable(real), false)));
        loss_d.backward();
        s.d_step_bytes.push_back(ddp.reducer().last_backward_bytes());
        for (const Variable& p : gan->generator->parameters()) {
          for (double v : p.grad().to_vector()) s.g_grads_untouched = s.g_grads_untouched && v == 42.0;
        }
        gan->zero_grad();
        mean(softplus(-gan->discriminator->run(fake, false))).backward();
        s.g_step_bytes.push_back(ddp.reducer().last_backward_bytes());
      }
      s.stats = ddp.reducer().stats();
      s.buckets_within = buckets_within_parameters(ddp.reducer());
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      const Seen& s = seen[static_cast<size_t>(r)];
      CHECK(s.d_step_bytes == std::vector<size_t>(3, s.d_bytes));
      CHECK(s.g_step_bytes == std::vector<size_t>(3, s.d_bytes + s.g_bytes));
      CHECK(s.g_grads_untouched);
      REQUIRE(s.stats.size() == 2);  // the D phase and the G phase
      CHECK(s.stats[0].description.find("discriminator") != std::string::npos);
      CHECK(s.stats[0].description.find("generator") == std::string::npos);
      CHECK(s.stats[0].bytes_per_backward == s.d_bytes);
      CHECK(s.stats[0].backwards == 3);
      CHECK(s.stats[0].rebuilds == 1);
      CHECK(s.stats[1].rebuilds == 1);
      CHECK(s.buckets_within);  // D and G phases share one flat storage
    }
  }
}

TEST_CASE("threads: ranks whose backwards reach different parts all get the named error",
          "[reducer][threads][errors]") {
  for (int n = 2; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<size_t> bytes_after(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      auto gan = std::make_shared<TinyGan>(3, false);
      DistributedDataParallel ddp(gan, g);
      Tensor z = slice_rows(random_tensor({kGlobalBatch, 4}, 5), g->rank(), g->size());
      Variable fake = gan->generator->forward(Variable(z));
      // Rank 0 runs the D step's backward while the others run the G step's.
      Variable loss = g->rank() == 0 ? mean(gan->discriminator->run(fake.detach(), false))
                                     : mean(gan->discriminator->run(fake, false));
      try {
        loss.backward();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(g->rank())] = e.what();
      }
      // The agreement itself completed on every rank, so the next step is in step again.
      mean(gan->discriminator->run(fake.detach(), false)).backward();
      bytes_after[static_cast<size_t>(g->rank())] = ddp.reducer().last_backward_bytes();
    });
    for (int r = 0; r < n; ++r) {
      const std::string& e = errors[static_cast<size_t>(r)];
      INFO("rank " << r << ": " << e);
      CHECK(e.find("ranks diverge in TinyGan") != std::string::npos);
      CHECK(e.find("part 'generator' (first parameter 'generator.0.weight') on " + std::to_string(n - 1) +
                   " of " + std::to_string(n) + " ranks, " + (r == 0 ? "not including" : "including") +
                   " this one") != std::string::npos);
      CHECK(bytes_after[static_cast<size_t>(r)] > 0);
    }
  }
}

namespace {

// A one-tensor model and a stray leaf that is not part of it: a rank that "reaches
// nothing" runs its backward through the stray leaf only.
struct OutOfStepRank {
  Variable w{random_tensor({4}, 7), true};
  Variable stray{random_tensor({4}, 8), true};
  Tensor x;
  explicit OutOfStepRank(int rank) : x(random_tensor({4}, 100 + static_cast<uint64_t>(rank))) {}
  Variable model_loss() { return sum(mul(w, Variable(x))); }
  Variable stray_loss() { return sum(mul(stray, Variable(x))); }
};

enum class Skip { reach_nothing, no_backward };

// Rank 1 is out of step in iteration 1: its backward reaches none of the Reducer's
// parameters, or it runs no backward at all; every rank steps an optimizer each iteration.
// Returns each rank's error (empty when none was thrown within 4 iterations).
std::vector<std::string> run_out_of_step(int n, Skip skip, bool prepare) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
    OutOfStepRank m(g->rank());
    Reducer reducer({m.w}, {"w"}, g, ReducerOptions{.name = "OneLayer"});
    optim::SGD opt({m.w, m.stray}, {.lr = 0.1});
    try {
      for (int it = 0; it < 4; ++it) {
        opt.zero_grad();
        const bool out_of_step = g->rank() == 1 && it == 1;
        if (out_of_step && skip == Skip::no_backward) {
          opt.step();
          continue;
        }
        Variable loss = out_of_step ? m.stray_loss() : m.model_loss();
        if (prepare) reducer.prepare_for_backward(loss);
        loss.backward();
        opt.step();
      }
      g->barrier("end of training")->wait();  // as a training program ends
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(g->rank())] = e.what();
    }
  });
  return errors;
}

}  // namespace

TEST_CASE("threads: a rank whose backward reaches none of the parameters is caught, never mixed",
          "[reducer][threads][errors]") {
  for (int n = 2; n <= 3; ++n) {
    INFO(n << " thread ranks");
    // Rank 0's second backward (iteration 1) pairs with rank 1's third (iteration 2): both
    // have seen the same number of syncs, but not of backwards and steps.
    const std::vector<std::string> errors = run_out_of_step(n, Skip::reach_nothing, false);
    for (int r = 0; r < n; ++r) {
      const std::string& e = errors[static_cast<size_t>(r)];
      INFO("rank " << r << ": " << e);
      CHECK(e.find("ranks diverge in OneLayer: the ranks are at different backwards or optimizer steps") !=
            std::string::npos);
      CHECK(e.find("rank 0: backward 2 after 1 optimizer step; rank 1: backward 3 after 2 optimizer steps") !=
            std::string::npos);
      CHECK(e.find("this is rank " + std::to_string(r)) != std::string::npos);
    }
  }
}

TEST_CASE("threads: a rank that runs one backward fewer is caught at the next agreement",
          "[reducer][threads][errors]") {
  const std::vector<std::string> errors = run_out_of_step(2, Skip::no_backward, false);
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << e);
    CHECK(e.find("rank 0: backward 2 after 1 optimizer step; rank 1: backward 2 after 2 optimizer steps") !=
          std::string::npos);
  }
}

TEST_CASE("threads: with prepare_for_backward on every rank, a rank that reaches nothing contributes zeros",
          "[reducer][threads]") {
  // The remedy the error names: every rank agrees before every backward, so rank 1's empty
  // iteration takes part with zeros. Oracle: w's gradient in iteration 1 is the sum of the
  // other ranks' x over n; w itself follows plain SGD on the averaged gradients.
  for (int n = 2; n <= 3; ++n) {
    INFO(n << " thread ranks");
    std::vector<Tensor> final_w(static_cast<size_t>(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      OutOfStepRank m(g->rank());
      Reducer reducer({m.w}, {"w"}, g, ReducerOptions{.name = "OneLayer"});
      optim::SGD opt({m.w}, {.lr = 0.1});
      try {
        for (int it = 0; it < 3; ++it) {
          opt.zero_grad();
          Variable loss = g->rank() == 1 && it == 1 ? m.stray_loss() : m.model_loss();
          reducer.prepare_for_backward(loss);
          loss.backward();
          opt.step();
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(g->rank())] = e.what();
      }
      final_w[static_cast<size_t>(g->rank())] = m.w.data().clone();
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << errors[static_cast<size_t>(r)]);
      CHECK(errors[static_cast<size_t>(r)].empty());
    }
    // Oracle: w -= 0.1 * mean(x) in iterations 0 and 2, w -= 0.1 * (sum of x but rank 1's) / n in 1.
    Tensor expected = random_tensor({4}, 7);
    for (int it = 0; it < 3; ++it) {
      for (int k = 0; k < 4; ++k) {
        double g = 0;
        for (int r = 0; r < n; ++r) {
          if (r == 1 && it == 1) continue;
          g += random_tensor({4}, 100 + static_cast<uint64_t>(r)).data<float>()[k];
        }
        expected.data<float>()[k] -= static_cast<float>(0.1 * g / n);
      }
    }
    require_close({final_w[0]}, {expected}, 1e-6);
    for (int r = 1; r < n; ++r) require_bitwise_equal({final_w[static_cast<size_t>(r)]}, {final_w[0]});
  }
}

TEST_CASE("threads: no_sync micro-batches then a synced one average the accumulated sums",
          "[reducer][threads][no_sync]") {
  // Reference: one process, each micro-batch on the global rows, gradients accumulated.
  auto ref = make_side_model();
  for (int micro = 0; micro < 3; ++micro) {
    micro_batch_loss(*ref, random_tensor({kGlobalBatch, 5}, 300 + micro), micro).backward();
  }
  std::vector<Tensor> expected;
  for (const auto& [name, p] : ref->named_parameters()) expected.push_back(p.grad().clone());

  for (int n = 2; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(n));
    std::vector<std::vector<int64_t>> synced(static_cast<size_t>(n));
    std::vector<size_t> bytes(static_cast<size_t>(n)), all_bytes(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      const size_t r = static_cast<size_t>(g->rank());
      auto model = make_side_model();
      DistributedDataParallel ddp(model, g);
      synced[r].push_back(ddp.reducer().synced_backwards());
      {
        auto guard = ddp.no_sync();
        for (int micro = 0; micro < 2; ++micro) {
          Tensor x = slice_rows(random_tensor({kGlobalBatch, 5}, 300 + micro), g->rank(), g->size());
          micro_batch_loss(*model, x, micro).backward();
        }
      }
      synced[r].push_back(ddp.reducer().synced_backwards());  // nothing communicated yet
      Tensor x = slice_rows(random_tensor({kGlobalBatch, 5}, 302), g->rank(), g->size());
      micro_batch_loss(*model, x, 2).backward();  // reaches fc only; side's sums are due too
      synced[r].push_back(ddp.reducer().synced_backwards());
      bytes[r] = ddp.reducer().last_backward_bytes();
      all_bytes[r] = bytes_of(model->parameters());
      for (const auto& [name, p] : model->named_parameters()) grads[r].push_back(p.grad().clone());
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(synced[static_cast<size_t>(r)] == std::vector<int64_t>{0, 0, 1});
      CHECK(bytes[static_cast<size_t>(r)] == all_bytes[static_cast<size_t>(r)]);
      require_close(grads[static_cast<size_t>(r)], expected, 1e-6);
      require_bitwise_equal(grads[static_cast<size_t>(r)], grads[0]);
    }
  }
}

namespace {

// One LayerDrop run: per iteration, every parameter's gradient after the backward
// (undefined when the iteration's subset does not use it).
struct LayerDropRun {
  std::vector<std::vector<Tensor>> grads;  // [iteration][parameter]
  size_t parameter_bytes = 0;
  size_t first_bucket_bytes = 0;  // bucket_bytes() after the first backward
  size_t most_bucket_bytes = 0;   // the largest bucket_bytes() seen after a backward
  bool buckets_within = true;     // buckets_within_parameters() after every backward
  size_t phases = 0;
  bool all_rebuilt_once = true;  // every phase (each has had two backwards or more)
};

// require_close's test (within rel of `want`, or 1e-6) as one verdict per tensor: this
// suite compares thousands of gradients.
bool all_close(const Tensor& got, const Tensor& want, double rel) {
  const std::vector<double> g = got.to_vector(), w = want.to_vector();
  if (g.size() != w.size()) return false;
  for (size_t k = 0; k < g.size(); ++k) {
    const double diff = std::abs(g[k] - w[k]);
    if (!(diff <= 1e-6 || diff <= rel * std::abs(w[k]))) return false;
  }
  return true;
}

constexpr int64_t kLayerDropWidth = 16;
constexpr int kLayerDropSubsets = 12;
constexpr int kLayerDropIterations = 3 * 2 * kLayerDropSubsets;

Tensor layer_drop_input(int iteration) {
  return random_tensor({kGlobalBatch, kLayerDropWidth}, 700 + iteration);
}

// Each random subset is used for two iterations in a row (its phase is rebuilt from the
// observed order at its second backward), and the 12 subsets come round three times (a
// phase met again reuses its layout).
std::vector<bool> layer_drop_pattern(int iteration) {
  return layer_drop_subset((iteration / 2) % kLayerDropSubsets);
}

LayerDropRun train_layer_drop(const std::shared_ptr<dist::ProcessGroup>& g, bool as_view) {
  auto model = std::make_shared<LayerDropModel>(kLayerDropWidth, /*seed=*/21);
  DdpOptions options;
  options.reducer.gradient_as_bucket_view = as_view;
  DistributedDataParallel ddp(model, g, options);
  LayerDropRun run;
  run.parameter_bytes = bytes_of(model->parameters());
  for (int it = 0; it < kLayerDropIterations; ++it) {
    model->zero_grad();
    Tensor x = slice_rows(layer_drop_input(it), g->rank(), g->size());
    model->loss(Variable(x), layer_drop_pattern(it)).backward();
    if (it == 0) run.first_bucket_bytes = ddp.reducer().bucket_bytes();
    run.most_bucket_bytes = std::max(run.most_bucket_bytes, ddp.reducer().bucket_bytes());
    run.buckets_within = run.buckets_within && buckets_within_parameters(ddp.reducer());
    std::vector<Tensor>& grads = run.grads.emplace_back();
    for (const Variable& p : model->parameters())
      grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  }
  for (const PhaseStats& phase : ddp.reducer().stats()) {
    ++run.phases;
    run.all_rebuilt_once = run.all_rebuilt_once && phase.rebuilds == 1;
  }
  return run;
}

}  // namespace

TEST_CASE(
    "threads: a LayerDrop model's phases share one flat storage of its parameters' bytes, gradients as "
    "the oracle's",
    "[reducer][threads][phases]") {
  // The oracle: per iteration, the average over ranks of each rank's gradients, computed
  // without a Reducer.
  constexpr int kRanks = 3;  // not a power of two: the prescale rounds
  auto oracle_model = std::make_shared<LayerDropModel>(kLayerDropWidth, /*seed=*/21);
  std::vector<std::vector<Tensor>> expected;
  for (int it = 0; it < kLayerDropIterations; ++it) {
    std::vector<Tensor> sum;
    for (int r = 0; r < kRanks; ++r) {
      oracle_model->zero_grad();
      Tensor x = slice_rows(layer_drop_input(it), r, kRanks);
      oracle_model->loss(Variable(x), layer_drop_pattern(it)).backward();
      std::vector<Variable> params = oracle_model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        Tensor g = params[i].grad().defined() ? params[i].grad().clone() : Tensor();
        if (r == 0) {
          sum.push_back(g);
        } else if (g.defined()) {
          sum[i] = kernels::add(sum[i], g);
        }
      }
    }
    for (Tensor& t : sum) {
      if (t.defined()) t = kernels::scale(t, 1.0 / kRanks);
    }
    expected.push_back(std::move(sum));
  }

  // Rank 0's gradients with copies: every other run must match them bit for bit (the
  // threads backend sums each element in rank order whatever the buckets).
  std::vector<std::vector<Tensor>> copied_grads;
  for (bool as_view : {false, true}) {
    INFO("gradient_as_bucket_view " << as_view);
    std::vector<LayerDropRun> runs(kRanks);
    run_reducer_ranks(kRanks, [&](std::shared_ptr<dist::ProcessGroup> g) {
      runs[static_cast<size_t>(g->rank())] = train_layer_drop(g, as_view);
    });
    if (!as_view) copied_grads = runs[0].grads;
    for (int r = 0; r < kRanks; ++r) {
      INFO("rank " << r);
      const LayerDropRun& run = runs[static_cast<size_t>(r)];
      REQUIRE(run.grads.size() == expected.size());
      for (size_t it = 0; it < expected.size(); ++it) {
        INFO("iteration " << it);
        for (size_t i = 0; i < expected[it].size(); ++i) {
          INFO("parameter " << i);
          REQUIRE(run.grads[it][i].defined() == expected[it][i].defined());
          if (!expected[it][i].defined()) continue;
          REQUIRE(all_close(run.grads[it][i], expected[it][i], 1e-6));
          require_bitwise_equal({run.grads[it][i]}, {copied_grads[it][i]});
        }
      }
      CHECK(run.all_rebuilt_once);
      // Every subset keeps its phase, in the storage made at construction: never more.
      CHECK(run.phases == static_cast<size_t>(kLayerDropSubsets));
      CHECK(run.buckets_within);
      CHECK(run.most_bucket_bytes == run.first_bucket_bytes);
      CHECK(run.most_bucket_bytes >= run.parameter_bytes);
    }
  }
}

namespace {

// The gradients themselves (views of the flat storage), not copies.
std::vector<Tensor> grad_views(const std::vector<Variable>& params) {
  std::vector<Tensor> out;
  for (const Variable& p : params) out.push_back(p.grad());
  return out;
}

// The same elements of the same storage (or both undefined: no gradient).
bool same_place_as(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.shares_storage_with(b) && a.offset() == b.offset();
}

// Three iterations of `step` at 1..kMaxRanks thread ranks, each on a TinyGan wrapped whole
// with gradients as bucket views. `step` gives two verdicts per iteration (named `what`);
// both must hold at all three iterations on every rank.
using ViewStep = std::function<std::array<bool, 2>(TinyGan&, dist::ProcessGroup&, int it)>;
void check_view_steps(const std::array<const char*, 2>& what, const ViewStep& step) {
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<std::array<int, 2>> held(static_cast<size_t>(n), {0, 0});
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      auto gan = std::make_shared<TinyGan>(3, /*dynamic=*/false);
      DdpOptions options;
      options.reducer.gradient_as_bucket_view = true;
      DistributedDataParallel ddp(gan, g, options);
      for (int it = 0; it < 3; ++it) {
        const std::array<bool, 2> verdicts = step(*gan, *g, it);
        for (size_t k = 0; k < 2; ++k) held[static_cast<size_t>(g->rank())][k] += verdicts[k] ? 1 : 0;
      }
    });
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < 2; ++k) {
        INFO("rank " << r << ": " << what[k]);
        CHECK(held[static_cast<size_t>(r)][k] == 3);
      }
    }
  }
}

Variable loss_d_of(TinyGan& gan, const Variable& fake, const Tensor& real) {
  return mean(softplus(gan.discriminator->run(fake.detach(), false))) +
         mean(softplus(-gan.discriminator->run(Variable(real), false)));
}

}  // namespace

TEST_CASE("threads: with gradients as bucket views, the D and G phases lie in regions of their own",
          "[reducer][threads][phases]") {
  // flat_layout.h: a phase of one part's parameters lies in that part's region of the flat
  // storage, so D's gradients, views of it after the D step, stay where they are (not
  // copied) through the G step, and G's through the next D step.
  check_view_steps(
      {"D's gradients kept", "D's gradients in place"}, [](TinyGan& gan, dist::ProcessGroup& g, int it) {
        const std::vector<Variable> d = gan.discriminator->parameters(), gen = gan.generator->parameters();
        Tensor z = slice_rows(random_tensor({kGlobalBatch, 4}, 60 + it), g.rank(), g.size());
        Tensor real = slice_rows(random_tensor({kGlobalBatch, 3}, 70 + it), g.rank(), g.size());
        Variable fake = gan.generator->forward(Variable(z));
        for (const Variable& p : d) Variable(p).set_grad(Tensor());
        loss_d_of(gan, fake, real).backward();
        const std::vector<Tensor> d_views = grad_views(d), d_after = grads_of(d);
        for (const Variable& p : gen) Variable(p).set_grad(Tensor());
        mean(softplus(-gan.discriminator->run(fake, false))).backward({.inputs = gen});
        bool same_place = true;
        for (size_t i = 0; i < d.size(); ++i)
          same_place = same_place && same_place_as(d[i].grad(), d_views[i]);
        return std::array<bool, 2>{same_bits(grads_of(d), d_after), same_place};
      });
}

TEST_CASE(
    "threads: with gradients as bucket views, a phase over both parts leaves the gradients of another phase "
    "as they were",
    "[reducer][threads][phases]") {
  // A G step backed through D as well (no inputs) is one phase over both parts: it lies
  // over the whole flat storage, D's region included. Its G gradients, views of it, must
  // survive the next D step, whose buckets lie in D's region.
  check_view_steps({"G's gradients kept", "G's gradients moved (else the test proves nothing)"},
                   [](TinyGan& gan, dist::ProcessGroup& g, int it) {
                     const std::vector<Variable> d = gan.discriminator->parameters(),
                                                 gen = gan.generator->parameters();
                     Tensor z = slice_rows(random_tensor({kGlobalBatch, 4}, 80 + it), g.rank(), g.size());
                     Tensor real = slice_rows(random_tensor({kGlobalBatch, 3}, 90 + it), g.rank(), g.size());
                     Variable fake = gan.generator->forward(Variable(z));
                     for (const Variable& p : gan.parameters()) Variable(p).set_grad(Tensor());
                     mean(softplus(-gan.discriminator->run(fake, false))).backward();  // G and D
                     const std::vector<Tensor> g_views = grad_views(gen), g_after = grads_of(gen);
                     for (const Variable& p : d) Variable(p).set_grad(Tensor());
                     loss_d_of(gan, fake, real).backward();
                     bool any_moved = false;
                     for (size_t i = 0; i < gen.size(); ++i)
                       any_moved = any_moved || !same_place_as(gen[i].grad(), g_views[i]);
                     return std::array<bool, 2>{same_bits(grads_of(gen), g_after), any_moved};
                   });
}

TEST_CASE("threads: a captured backward skips the agreement and its replays count as backwards",
          "[reducer][threads][cuda-graphs]") {
  // A step captured into a CUDA graph (runtime/step_capture.h) runs its host code once;
  // on the CPU nothing is captured, but the Reducer's bookkeeping is the same.
  struct Seen {
    std::string too_early;
    int64_t agreements_before = -1, agreements_after = -1, synced_after_capture = -1,
            synced_after_replays = -1;
    int64_t phase_backwards = -1;
    std::vector<double> grad;
    std::string eager_after;
  };
  constexpr int kRanks = 2;
  std::vector<Seen> seen(kRanks);
  run_reducer_ranks(kRanks, [&](std::shared_ptr<dist::ProcessGroup> g) {
    Seen& s = seen[static_cast<size_t>(g->rank())];
    Variable w(Tensor::from_values({2}, {1, 2}), true);
    Reducer reducer({w}, {"net.w"}, g);
    const Tensor x = Tensor::from_values({2}, {1.0 + g->rank(), 3});
    auto backward = [&] { sum(mul(w, Variable(x))).backward(); };
    {
      StepCapture capture;  // before the phase exists: refused, naming the warm-up
      ActiveCaptureScope active(&capture);
      try {
        backward();
      } catch (const Error& e) {
        s.too_early = e.message();
      }
    }
    w.set_grad(Tensor());
    backward();  // the warm-up: the phase is made, then rebuilt
    w.set_grad(Tensor());
    backward();
    s.agreements_before = reducer.agreements();
    StepCapture capture;
    {
      ActiveCaptureScope active(&capture);
      w.set_grad(Tensor());
      backward();
    }
    s.agreements_after = reducer.agreements();
    s.synced_after_capture = reducer.synced_backwards();
    s.grad = w.grad().to_vector();
    capture.run_launch_callbacks(false);
    for (int replay = 0; replay < 3; ++replay) capture.run_launch_callbacks(true);
    s.synced_after_replays = reducer.synced_backwards();
    s.phase_backwards = reducer.stats().at(0).backwards;
    try {  // positions advanced by the replays agree with the other rank's
      w.set_grad(Tensor());
      backward();
    } catch (const Error& e) {
      s.eager_after = e.message();
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    const Seen& s = seen[static_cast<size_t>(r)];
    INFO("rank " << r);
    CHECK_THAT(s.too_early, Catch::Contains("has no phase yet") && Catch::Contains("warm-up"));
    CHECK(s.agreements_after == s.agreements_before);  // no agreement in the captured backward
    CHECK(s.synced_after_capture == 3);
    CHECK(s.grad == std::vector<double>{1.5, 3.0});  // still averaged over the ranks: (1 + 2) / 2, 3
    CHECK(s.synced_after_replays == 6);
    CHECK(s.phase_backwards == 6);
    CHECK(s.eager_after.empty());
  }
}
