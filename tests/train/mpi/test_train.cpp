// The training loop at 2 ranks: every model runs and writes its outputs, and a resumed
// run reaches bitwise the parameters of an uninterrupted one.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <sstream>

#include "models/data/dataset.h"
#include "models/train/rank_stats.h"
#include "models/train/trainer.h"
#include "runtime/checkpoint.h"
#include "runtime/dist/process_group.h"
#include "tests/train/json_reader.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group();
  return group;
}

// A fresh directory shared by the ranks (rank 0 creates it).
std::string fresh_dir(const std::string& name) {
  std::string dir = (fs::temp_directory_path() / ("tandem-test-" + name)).string();
  if (world()->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  world()->barrier("fresh dir")->wait();
  return dir;
}

models::TrainOptions short_run(const std::string& model, const std::string& dir, int64_t iters) {
  models::TrainOptions o;
  o.model = model;
  o.data = model == "ring8-mlp" ? "ring8" : "fashion-mnist";
  o.iters = iters;
  o.batch = 8;
  o.log_every = 2;
  o.out = dir;
  o.seed = 5;
  return o;
}

bool fashion_mnist_present() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// A Fashion-MNIST directory holding `count` blank training images (rank 0 writes it).
std::string tiny_fashion_mnist(int64_t count) {
  std::string dir = fresh_dir("tiny-fashion-mnist");
  if (world()->rank() == 0) {
    data::write_idx_u8(dir + "/train-images-idx3-ubyte.gz",
                       {{count, 28, 28}, std::vector<uint8_t>(static_cast<size_t>(count * 28 * 28), 0)});
    data::write_idx_u8(dir + "/train-labels-idx1-ubyte.gz",
                       {{count}, std::vector<uint8_t>(static_cast<size_t>(count), 0)});
  }
  world()->barrier("tiny dataset")->wait();
  return dir;
}

// Rank 0 rewrites one metadata entry of the checkpoint of `iteration` in `dir` (removes
// it when `value` is nullopt).
void relabel_checkpoint(const std::string& dir, int64_t iteration, const std::string& key,
                        const std::optional<std::string>& value) {
  if (world()->rank() == 0) {
    std::string path = checkpoint_path(dir, "ckpt", iteration);
    SafetensorsFile file = load_safetensors(path);
    if (value) {
      file.metadata[key] = *value;
    } else {
      file.metadata.erase(key);
    }
    save_safetensors(path, file.tensors, file.metadata);
  }
  world()->barrier("relabelled")->wait();
}

// Rank 0 cuts the checkpoint of `iteration` in `dir` to its first 100 bytes.
void truncate_checkpoint(const std::string& dir, int64_t iteration) {
  if (world()->rank() == 0) fs::resize_file(checkpoint_path(dir, "ckpt", iteration), 100);
  world()->barrier("truncated")->wait();
}

}  // namespace

TEST_CASE("one collective gathers the losses averaged over the ranks and every rank's memory",
          "[train][stats]") {
  const int rank = world()->rank(), size = world()->size();
  // Rank r reports losses r + 1 and 2 (r + 1): the averages are (n + 1) / 2 and n + 1.
  models::RankStats stats = models::gather_rank_stats(*world(), rank + 1.0, 2.0 * (rank + 1));
  CHECK(stats.loss_d == Approx((size + 1) / 2.0));
  CHECK(stats.loss_g == Approx(size + 1.0));
  REQUIRE(stats.rss_mb.size() == static_cast<size_t>(size));
  CHECK(stats.rss_mb[static_cast<size_t>(rank)] == Approx(models::resident_mb()).margin(2.0));
  for (double mb : stats.rss_mb) CHECK(mb > 1.0);  // every slot filled by its rank
}

TEST_CASE("20 iterations straight equal 10 + resume + 10, bitwise", "[train][resume]") {
  std::ostringstream log;
  auto straight = models::train(short_run("ring8-mlp", fresh_dir("straight"), 20), world(), log);
  std::string dir = fresh_dir("resumed");
  auto first = models::train(short_run("ring8-mlp", dir, 10), world(), log);
  CHECK(first.iterations == 10);
  auto o = short_run("ring8-mlp", dir, 20);
  o.resume = true;
  auto second = models::train(o, world(), log);
  CHECK(second.start_iteration == 10);
  CHECK(second.iterations == 10);
  REQUIRE(second.parameters.size() == straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(std::memcmp(second.parameters[i].raw_data(), straight.parameters[i].raw_data(),
                        straight.parameters[i].bytes()) == 0);
  }
}

TEST_CASE("resumed from an earlier checkpoint, metrics.jsonl holds each iteration once", "[train][resume]") {
  // 20 iterations logged every 2; the checkpoint of iteration 20 is lost (as a crash before
  // it leaves things), so the resume from 10 logs 12..20 again. A torn line ends the file.
  std::string dir = fresh_dir("metrics-resumed");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 20);
  o.ckpt_every = 10;
  models::train(o, world(), log);
  if (world()->rank() == 0) {
    fs::remove(checkpoint_path(dir, "ckpt", 20));
    std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "{\"iteration\": 22, \"loss";
  }
  world()->barrier("checkpoint 20 removed")->wait();
  o.resume = true;
  CHECK(models::train(o, world(), log).start_iteration == 10);
  if (world()->rank() == 0) {
    std::ifstream in(dir + "/metrics.jsonl");
    std::vector<int64_t> iterations, ring8_summaries;  // the summary: once, at the end
    for (std::string line; std::getline(in, line);) {
      INFO(line);
      testing::JsonValue v = testing::JsonReader::parse(line);
      auto& list = v.members.count("ring8_modes") ? ring8_summaries : iterations;
      list.push_back(static_cast<int64_t>(v.at("iteration").number));
    }
    CHECK(iterations == std::vector<int64_t>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
    CHECK(ring8_summaries == std::vector<int64_t>{20});
  }
}

TEST_CASE("every model trains a few iterations and writes metrics, a picture and a checkpoint", "[train]") {
  for (std::string model : {"ring8-mlp", "mlp", "dcgan", "pggan"}) {
    if (model != "ring8-mlp" && !fashion_mnist_present()) {
      WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping " << model);
      continue;
    }
    INFO(model);
    std::string dir = fresh_dir(model);
    std::ostringstream log;
    auto o = short_run(model, dir, model == "pggan" ? 10 : 3);
    o.pggan_stage_iters = 4;  // stage 0, stage 1 fading in then stable, stage 2 within 10 iterations
    o.log_every = 1;
    o.check_replicas_every = 1;  // parameters every step; batch norm's statistics after their broadcast
    auto result = models::train(o, world(), log);
    CHECK(result.iterations == o.iters);
    if (world()->rank() == 0) {
      CHECK(fs::file_size(fs::path(dir) / "metrics.jsonl") > 0);
      std::ostringstream png;
      png << "samples-" << std::setw(6) << std::setfill('0') << o.iters << ".png";
      CHECK(fs::exists(fs::path(dir) / png.str()));
      CHECK(fs::exists(fs::path(dir) / ("ckpt-" + png.str().substr(8, 6) + ".safetensors")));
      if (model == "pggan") {
        CHECK(log.str().find("stage 1 (14x14), fade-in") != std::string::npos);
        CHECK(log.str().find("stage 2 (28x28)") != std::string::npos);
      }
    }
  }
}

TEST_CASE("resume refuses a checkpoint of another model, naming it", "[train][errors]") {
  std::string dir = fresh_dir("other-model");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  if (!fashion_mnist_present()) return;
  auto o = short_run("mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains("checkpoint of model 'ring8-mlp', but this run trains 'mlp'"));
}

TEST_CASE("a checkpoint whose tensors do not fit the model names the first mismatching parameter",
          "[train][errors]") {
  if (!fashion_mnist_present()) return;
  std::string dir = fresh_dir("relabelled");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  // Relabel the ring8 checkpoint as an mlp one without a record of its data (as written
  // before data was recorded): the metadata checks pass, the tensors do not fit.
  relabel_checkpoint(dir, 2, "model", "mlp");
  relabel_checkpoint(dir, 2, "data", std::nullopt);
  auto o = short_run("mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains("does not fit this model") && Catch::Contains("'generator.0.weight'") &&
                        Catch::Contains("[128, 16]") && Catch::Contains("[256, 64]"));
}

TEST_CASE("resume refuses a checkpoint written at another world size, naming both sizes", "[train][errors]") {
  std::string dir = fresh_dir("other-world-size");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  const std::string ranks = std::to_string(world()->size()), saved = std::to_string(world()->size() + 1);
  relabel_checkpoint(dir, 2, "world_size", saved);
  auto o = short_run("ring8-mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(
      models::train(o, world(), log),
      Catch::Contains("written by a run of " + saved + " ranks; resuming on " + ranks + " ranks") &&
          Catch::Contains("Resume with mpirun -np " + saved));
}

TEST_CASE("resume refuses, on every rank, when no checkpoint can be read; --resume-allow-fresh starts anew",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("unreadable");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  truncate_checkpoint(dir, 2);
  const std::string file = checkpoint_path(dir, "ckpt", 2);
  auto o = short_run("ring8-mlp", dir, 4);
  o.resume = true;
  const std::string refusal = "--resume: no checkpoint in " + dir + " can be read (" + file + ": truncated";
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains((world()->rank() == 0 ? "" : "rank 0 cannot resume: ") + refusal) &&
                        Catch::Contains("or pass --resume-allow-fresh to start from iteration 0"));
  CHECK(fs::file_size(file) == 100);  // untouched

  o.resume_allow_fresh = true;
  auto fresh = models::train(o, world(), log);
  CHECK(fresh.start_iteration == 0);
  CHECK(fresh.iterations == 4);
  CHECK(fs::file_size(file) == 100);  // still there, for whoever wants it
}

TEST_CASE("resume passes over a torn newest checkpoint to the one before", "[train][resume]") {
  std::string dir = fresh_dir("torn-newest");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 4);
  o.ckpt_every = 2;
  models::train(o, world(), log);
  truncate_checkpoint(dir, 4);
  o.iters = 6;
  o.resume = true;
  auto resumed = models::train(o, world(), log);  // rank 0's warning naming the file goes to stderr
  CHECK(resumed.start_iteration == 2);
  CHECK(resumed.iterations == 4);
}

TEST_CASE("a newest checkpoint that cannot be loaded is an error naming it and the one before",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("unloadable");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 4);
  o.ckpt_every = 2;
  models::train(o, world(), log);
  relabel_checkpoint(dir, 4, "iteration", "four");  // the header is fine, the content is not
  const std::string newest = checkpoint_path(dir, "ckpt", 4), older = checkpoint_path(dir, "ckpt", 2);
  o.iters = 6;
  o.resume = true;
  if (world()->rank() == 0) {
    CHECK_THROWS_WITH(models::train(o, world(), log),
                      Catch::Contains("--resume: " + newest + ": metadata 'iteration' is 'four'") &&
                          Catch::Contains(". If " + newest + " is damaged, move it out of " + dir +
                                          " to resume from the checkpoint before it, " + older));
  } else {
    CHECK_THROWS_WITH(
        models::train(o, world(), log),
        Catch::Contains("--resume: rank 0 resumes from " + newest + ", which this rank cannot load"));
  }
}

TEST_CASE("resume refuses a checkpoint beyond --iters", "[train][errors][resume]") {
  std::string dir = fresh_dir("beyond");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 4), world(), log);
  auto o = short_run("ring8-mlp", dir, 2);
  o.resume = true;
  CHECK_THROWS_WITH(
      models::train(o, world(), log),
      Catch::Contains("--resume: " + checkpoint_path(dir, "ckpt", 4) +
                      " is at iteration 4, beyond --iters 2; pass --iters 4 or more to continue that run"));
}

TEST_CASE("a batch larger than each rank's shard of the data stops every rank, naming both",
          "[train][errors]") {
  const int64_t samples = 10, ranks = world()->size(), shard = samples / ranks, batch = shard + 1;
  auto o = short_run("mlp", fresh_dir("small-data"), 2);
  o.data_dir = tiny_fashion_mnist(samples);
  o.batch = batch;
  std::ostringstream log, expected;
  expected << "--data fashion-mnist from --data-dir " << o.data_dir << " cannot feed --batch " << batch
           << " on " << ranks << " rank(s): DistributedSampler: batch " << batch
           << " per rank needs at least " << batch * ranks << " samples for " << ranks
           << " ranks; the dataset has " << samples << ", a shard of " << shard
           << " per rank. Lower --batch or start fewer ranks (mpirun -np)";
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains(expected.str()));
  CHECK(log.str().empty());  // before training
}

TEST_CASE("an --out that cannot be created stops every rank before training, naming it", "[train][errors]") {
  // A path under a regular file: no directory can be made there, even by root.
  const std::string file = fresh_dir("out-under-file") + "/regular-file";
  if (world()->rank() == 0) std::ofstream(file) << "not a directory";
  world()->barrier("regular file")->wait();
  auto o = short_run("ring8-mlp", file + "/run", 2);
  std::ostringstream log;
  if (world()->rank() == 0) {
    CHECK_THROWS_WITH(models::train(o, world(), log),
                      Catch::Contains("--out " + o.out + ": cannot create the directory (Not a directory)"));
  } else {
    CHECK_THROWS_WITH(
        models::train(o, world(), log),
        Catch::Contains("--out " + o.out + ": rank 0 found: cannot create the directory (Not a directory)"));
  }
  CHECK(log.str().empty());  // before training
}
