// Gradient accumulation through a GAN's own train_step at 2 ranks: k train_steps with
// accumulative_counts k equal one train_step on their concatenated batches, and a run whose
// length is not a multiple of k ends with a step on its last, partial accumulation. The same
// with R3GAN's objective (relativistic pairs and R1 and R2 per micro-batch). SGD,
// not Adam: Adam's first step hardly depends on the gradient's scale, SGD's is linear in it.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "autograd/optim.h"
#include "models/gan.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_world.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr int64_t kMicroRows = 8;  // global rows per micro-batch: 4 per rank (ring8's D packs 4)

enum class Wrap { whole, separate, whole_explicit_prepare };

// R3GAN's objective: the relativistic pairing loss (G's micro-step k pairs its fakes with
// micro-batch k's reals) with R1 and R2.
const models::GanObjective kR3gan{.loss = models::GanLoss::relativistic, .r1_gamma = 1.0, .r2_gamma = 1.0};

// A ring8-mlp GAN, its SGD optimizers with accumulative_counts k, and its wrapper.
struct GanRun {
  GanRun(Wrap wrap, int k, const models::GanObjective& objective = {})
      : gan(models::make_gan({.model = "ring8-mlp", .objective = objective, .seed = 3})) {
    auto add = [&](const std::string& name, const nn::Module& part) {
      wrappers.add(name,
                   std::make_shared<OptimWrapper>(
                       std::make_shared<optim::SGD>(part.parameters(), optim::SGDOptions{.lr = 0.05}), k));
    };
    add("generator", *gan->generator);
    add("discriminator", *gan->discriminator);
    if (wrap == Wrap::separate) {
      ddp = std::make_unique<SeparateDistributedDataParallel>(gan, world());
    } else {
      auto whole = std::make_unique<DistributedDataParallel>(gan, world());
      if (wrap == Wrap::whole_explicit_prepare) {
        Reducer* reducer = &whole->reducer();
        gan->before_backward = [reducer](const Variable& loss) { reducer->prepare_for_backward(loss); };
      }
      ddp = std::move(whole);
    }
  }
  // One train_step on this rank's rows of the given micro-batches, concatenated.
  LogVars step(const std::vector<int>& micros) {
    const int64_t rows = kMicroRows / world()->size();
    Batch b{Tensor::empty({rows * static_cast<int64_t>(micros.size()), 2}),
            Tensor::empty({rows * static_cast<int64_t>(micros.size()), 16})};
    for (size_t i = 0; i < micros.size(); ++i) {
      const uint64_t seed = static_cast<uint64_t>(micros[i]);
      Tensor real = slice_rows(random_tensor({kMicroRows, 2}, 100 + seed), world()->rank(), world()->size());
      Tensor z = slice_rows(random_tensor({kMicroRows, 16}, 200 + seed), world()->rank(), world()->size());
      b.inputs.narrow_rows(static_cast<int64_t>(i) * rows, rows).copy_(real);
      b.targets.narrow_rows(static_cast<int64_t>(i) * rows, rows).copy_(z);
    }
    return ddp->train_step(b, wrappers);
  }
  uint64_t bytes() const {
    uint64_t sum = 0;
    for (const Reducer* r : ddp->all_reducers()) sum += r->total_bytes();
    return sum;
  }

  std::shared_ptr<models::GanModel> gan;
  OptimWrapperDict wrappers;
  std::unique_ptr<DataParallelWrapper> ddp;
};

const char* wrap_name(Wrap w) {
  return w == Wrap::whole ? "whole" : w == Wrap::separate ? "separate" : "whole, explicit prepare";
}

}  // namespace

TEST_CASE("GAN: 2 micro-steps with accumulative_counts 2 equal 1 step on the concatenated batch",
          "[train][accumulation]") {
  for (const bool r3gan : {false, true}) {
    for (Wrap wrap : {Wrap::whole, Wrap::separate, Wrap::whole_explicit_prepare}) {
      INFO(wrap_name(wrap) << " wrap, " << world()->size() << " ranks"
                           << (r3gan ? ", rpgan with R1 and R2" : ""));
      const models::GanObjective objective = r3gan ? kR3gan : models::GanObjective{};
      GanRun reference(wrap, 1, objective);
      reference.step({0, 1});
      reference.step({2, 3});  // a second cycle: it must start clean (D's gradients from G's step cleared)

      GanRun accumulated(wrap, 2, objective);
      const std::vector<Tensor> before = parameter_values(*accumulated.gan);
      const uint64_t bytes_before = accumulated.bytes();
      LogVars first = accumulated.step({0});
      require_bitwise_equal(parameter_values(*accumulated.gan), before);  // nothing stepped
      CHECK(accumulated.bytes() == bytes_before);                         // nothing sent
      CHECK(first.count("loss_d") == 1);
      CHECK(first.count("loss_g") == 0);  // G waits for D's step
      LogVars second = accumulated.step({1});
      CHECK(second.count("loss_g") == 1);
      accumulated.step({2});
      accumulated.step({3});
      require_close(parameter_values(*accumulated.gan), parameter_values(*reference.gan), 1e-5);
    }
  }
}

TEST_CASE("GAN: the last, partial accumulation of a run steps with the loss over the micro-steps it holds",
          "[train][accumulation]") {
  // 3 train_steps with accumulative_counts 2 in a run of 3: a step on micro-batches 0 and 1,
  // then one on micro-batch 2 alone (its loss divided by 1, not 2).
  GanRun reference(Wrap::whole, 1);
  reference.step({0, 1});
  reference.step({2});

  GanRun accumulated(Wrap::whole, 2);
  for (const auto& [name, wrapper] : accumulated.wrappers.items()) wrapper->initialize_count_status(0, 3);
  for (int micro = 0; micro < 3; ++micro) accumulated.step({micro});
  require_close(parameter_values(*accumulated.gan), parameter_values(*reference.gan), 1e-5);
  for (const auto& [name, wrapper] : accumulated.wrappers.items()) CHECK_FALSE(wrapper->accumulating());

  CHECK_THROWS_WITH(accumulated.wrappers["generator"].initialize_count_status(3, 10),
                    Catch::Contains("calls_done 3 is not a multiple of accumulative_counts 2") &&
                        Catch::Contains("after_step"));

  // Extended from that end (3 calls, right after a step) to 6: the accumulations count
  // from 3, a step on micro-batches 3 and 4, then one on 5 alone.
  for (const auto& [name, wrapper] : accumulated.wrappers.items())
    wrapper->initialize_count_status(3, 6, true);
  for (int micro = 3; micro < 6; ++micro) accumulated.step({micro});
  reference.step({3, 4});
  reference.step({5});
  require_close(parameter_values(*accumulated.gan), parameter_values(*reference.gan), 1e-5);
  for (const auto& [name, wrapper] : accumulated.wrappers.items()) CHECK_FALSE(wrapper->accumulating());
}

TEST_CASE("GAN: different accumulative_counts for G and D are refused, naming both",
          "[train][accumulation]") {
  GanRun run(Wrap::whole, 1);
  OptimWrapperDict mixed;
  mixed.add("generator",
            std::make_shared<OptimWrapper>(
                std::make_shared<optim::SGD>(run.gan->generator->parameters(), optim::SGDOptions{}), 2));
  mixed.add("discriminator", std::make_shared<OptimWrapper>(std::make_shared<optim::SGD>(
                                 run.gan->discriminator->parameters(), optim::SGDOptions{})));
  Batch b{random_tensor({4, 2}, 1), random_tensor({4, 16}, 2)};
  CHECK_THROWS_WITH(
      run.ddp->train_step(b, mixed),
      Catch::Contains("accumulative_counts of the generator (2) and of the discriminator (1) differ"));
}
