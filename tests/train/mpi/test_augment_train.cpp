// tandem-train with --augment and the adaptive p (--augment-target) at 1-3 ranks: a run
// stopped at an iteration inside p's 4-iteration interval and resumed equals a straight run
// byte for byte (its last checkpoint, p and the interval's counts included), p moves and is
// logged, and a resume with other augmentation settings is refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "models/train/trainer.h"
#include "runtime/checkpoint.h"
#include "tests/mpi_world.h"
#include "tests/test_files.h"

using namespace tandem;
using tandem::testing::read_bytes;
using tandem::testing::world;
namespace fs = std::filesystem;

namespace {

bool fashion_mnist_present() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

std::string fresh_dir(const std::string& name) {
  std::string dir = (fs::temp_directory_path() / ("tandem-test-augment-" + name)).string();
  if (world()->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world()->barrier("fresh dir")->wait();
  return dir;
}

models::TrainOptions augmented_run(const std::string& dir, int64_t iters) {
  models::TrainOptions o;
  o.model = "mlp";
  o.data = "fashion-mnist";
  o.iters = iters;
  o.global_batch = 24;
  o.log_every = 1;
  o.ckpt_every = 7;
  o.out = dir;
  o.seed = 5;
  o.augment = models::parse_augment_policy("color,translation,cutout");
  o.augment_target = 0.6;
  o.augment_kimg = 0.48;  // p moves by 24 * 4 / 480 = 0.2 every 4 iterations
  return o;
}

}  // namespace

TEST_CASE("adaptive p: stopped inside an interval and resumed equals a straight run byte for byte",
          "[train][augment][resume]") {
  if (!fashion_mnist_present()) return;
  std::ostringstream log;
  const std::string straight_dir = fresh_dir("straight");
  models::train(augmented_run(straight_dir, 14), world(), log);
  const std::string dir = fresh_dir("resumed");
  models::train(augmented_run(dir, 7), world(), log);  // 7: within the interval 4..8
  models::TrainOptions o = augmented_run(dir, 14);
  o.resume = true;
  models::train(o, world(), log);
  const std::string straight = read_bytes(checkpoint_path(straight_dir, "ckpt", 14));
  CHECK(read_bytes(checkpoint_path(dir, "ckpt", 14)) == straight);
  // p moved, and is logged.
  const SafetensorsFile file = load_safetensors(checkpoint_path(straight_dir, "ckpt", 14));
  const std::vector<double> state = file.tensors.at("augment.0").to_vector();
  INFO("p " << state[0]);
  CHECK(state[0] > 0.0);
  CHECK(read_bytes(straight_dir + "/metrics.jsonl").find("\"augment_p\"") != std::string::npos);
  // The checkpoint inside the interval holds every rank's counts of iterations 5..7 (the
  // interval so far): 3 iterations of 24 D(real) outputs, summed over the ranks.
  const std::vector<double> at7 =
      load_safetensors(checkpoint_path(dir, "ckpt", 7)).tensors.at("augment.0").to_vector();
  CHECK(at7[2] == 3 * 24);
  CHECK(std::abs(at7[1]) <= 3 * 24);
}

TEST_CASE("a resume with other augmentation settings is refused, naming them", "[train][augment][errors]") {
  if (!fashion_mnist_present()) return;
  std::ostringstream log;
  const std::string dir = fresh_dir("refused");
  models::train(augmented_run(dir, 2), world(), log);
  models::TrainOptions o = augmented_run(dir, 4);
  o.resume = true;
  o.augment = models::parse_augment_policy("color");
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains("--augment color,translation,cutout"));
  o.augment = models::parse_augment_policy("color,translation,cutout");
  o.augment_target = 0.5;
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains("--augment-target 0.6"));
}

TEST_CASE("an --augment-kimg so large that p cannot move is refused, naming the flag",
          "[train][augment][errors]") {
  if (!fashion_mnist_present()) return;
  std::ostringstream log;
  models::TrainOptions o = augmented_run(fresh_dir("kimg"), 2);
  o.augment_kimg = 1e308;  // used to fail with "AdaptiveAugment: step 0 must be positive"
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains("--augment-kimg 1e+308 at --global-batch"));
}
