// StepGraphPolicy: when a step runs eagerly, is captured into a CUDA graph, or replays it
// (host logic, no GPU), and the lines it leaves for the log.
#include <catch2/catch.hpp>
#include <memory>
#include <string>
#include <vector>

#include "models/gan.h"
#include "models/train/graphed_gan_step.h"
#include "models/train/step_graph_policy.h"
#include "runtime/error.h"

using namespace tandem;
using models::StepGraphPolicy;
using models::StepMode;

namespace {

std::string modes(StepGraphPolicy& policy, const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& key : keys) out += models::step_mode_name(policy.next(key))[0];
  return out;  // e: eager, c: capture, r: replay
}

}  // namespace

TEST_CASE("a stable step is captured after the warm-up and replayed", "[train][cuda-graphs]") {
  StepGraphPolicy policy(3);
  CHECK(modes(policy, {"a", "a", "a", "a", "a", "a"}) == "eeecrr");
  CHECK(policy.captures() == 1);
  CHECK(policy.replays() == 2);
  CHECK(policy.discards() == 0);
}

TEST_CASE("a changed step discards the graph, warms up again and recaptures", "[train][cuda-graphs]") {
  // The dynamic mlp's phases: blocks of 5 iterations with and without the extra layer.
  StepGraphPolicy policy(2);
  CHECK(modes(policy, {"x", "x", "x", "x", "x", "y", "y", "y", "y", "y", "x", "x", "x"}) == "eecrreecrreec");
  CHECK(policy.captures() == 3);
  CHECK(policy.discards() == 2);
}

TEST_CASE("a key that changes at every iteration never captures", "[train][cuda-graphs]") {
  // A progressive GAN fading in: its structure names a new alpha each iteration.
  StepGraphPolicy policy(2);
  CHECK(modes(policy, {"a0.1", "a0.2", "a0.3", "a0.4", "a0.5"}) == "eeeee");
  CHECK(policy.captures() == 0);
  // A last partial batch: one iteration of another shape, then back.
  CHECK(modes(policy, {"s", "s", "s", "s", "t", "s", "s", "s"}) == "eecreeec");
}

TEST_CASE("the policy's notes name the capture and the change", "[train][cuda-graphs]") {
  StepGraphPolicy policy(2);
  policy.next("mlp real[8, 784]");
  CHECK(policy.note().empty());
  policy.next("mlp real[8, 784]");
  policy.next("mlp real[8, 784]");
  CHECK(policy.note() == "cuda graphs: capturing the step (mlp real[8, 784]) after 2 eager iterations");
  policy.next("mlp real[8, 784]");
  CHECK(policy.note().empty());
  policy.next("mlp real[3, 784]");
  CHECK(policy.note() ==
        "cuda graphs: the step changed (mlp real[8, 784] -> mlp real[3, 784]): graph "
        "discarded, 2 eager iterations before capturing again");
}

TEST_CASE("a warm-up below 2 is refused, naming it", "[train][cuda-graphs]") {
  CHECK_THROWS_WITH(StepGraphPolicy(1), Catch::Contains("warm-up must be at least 2"));
}

TEST_CASE("the step key tells apart what a captured step bakes in", "[train][cuda-graphs]") {
  // pggan's description rounds its fade-in alpha; its kernels take the exact value.
  models::GanConfig config;
  config.model = "pggan";
  config.pggan_stage_iters = 2000;  // a fade of 1000 iterations: alpha moves by 0.001
  std::shared_ptr<models::GanModel> model = models::make_gan(config);
  const Batch batch{Tensor::zeros({4, 1, 28, 28}), Tensor::zeros({4, model->noise_dim()})};
  model->set_iteration(2001);
  const std::string structure = model->structure(), key = models::step_graph_key(*model, batch);
  model->set_iteration(2002);
  CHECK(model->structure() == structure);
  CHECK(models::step_graph_key(*model, batch) != key);
  // Past the fade the stage is stable: equal keys.
  model->set_iteration(3500);
  const std::string stable = models::step_graph_key(*model, batch);
  model->set_iteration(3501);
  CHECK(models::step_graph_key(*model, batch) == stable);
  // A batch of another size is another step.
  const Batch smaller{Tensor::zeros({3, 1, 28, 28}), Tensor::zeros({3, model->noise_dim()})};
  CHECK(models::step_graph_key(*model, smaller) != stable);
}
