// The Reducer's logic at 1-4 thread ranks (dist::run_ranks), without mpirun: the
// single-process oracle in every MMGeneration style, the D step sending nothing for G,
// ranks whose backwards diverge, and no_sync accumulation. The multi-rank MPI suite
// (mpi/test_reducer.cpp) runs the same models over real processes.
// Catch2 assertions are not thread-safe: ranks record what they saw, the main thread checks.
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/observer_scope.h"
#include "reducer/ddp.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/reducer/gan_fixture.h"

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
