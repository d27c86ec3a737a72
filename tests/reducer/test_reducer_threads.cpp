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
