// The generic checkpoint: every kind of piece comes back bitwise (saved again, the bytes are
// the same); a missing, unexpected or misshapen entry is named and changes nothing; a flipped
// byte is refused by the checksum; a symbolic link at the path is never written through;
// rank 0 writes and every rank loads.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <memory>

#include "autograd/lr_scheduler.h"
#include "autograd/nn.h"
#include "autograd/optim.h"
#include "models/training/checkpoint.h"
#include "models/training/ema_weights.h"
#include "runtime/dist/thread_process_group.h"
#include "runtime/rng.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::training;
using namespace tandem::testing;

namespace {

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
}

bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end() || !same_bytes(t.to(Device::cpu()), it->second.to(Device::cpu()))) return false;
  }
  return true;
}

StateDict snapshot(const StateDict& live) {
  StateDict out;
  for (const auto& [name, t] : live) out.emplace(name, t.clone());
  return out;
}

// A small training state of every kind a Checkpoint holds, its weights drawn from `seed`.
struct Run {
  Generator weights_rng;
  std::shared_ptr<nn::Linear> model;
  optim::Adam opt;
  optim::LrScheduler scheduler;
  training::EmaWeights ema;
  std::vector<Tensor> extra;
  Generator noise;
  Checkpoint checkpoint;

  explicit Run(uint64_t seed, int64_t out_features = 3)
      : weights_rng(seed),
        model(std::make_shared<nn::Linear>(4, out_features, true, weights_rng)),
        opt(model->parameters(), {.lr = 1e-3}),
        scheduler({&opt}, optim::parse_lr_schedule("warmup:4+cosine:10")),
        ema(model->parameters(), 0.9),
        extra{Tensor::full({2}, static_cast<double>(seed))},
        noise(seed + 100) {
    checkpoint.add_module("model", *model);
    checkpoint.add_optimizer("optim", opt);
    checkpoint.add_scheduler("schedule", scheduler);
    checkpoint.add_ema("ema", ema);
    checkpoint.add_tensors("extra", extra);
    checkpoint.add_generator("noise", noise);
  }

  // Steps that give every piece a state of its own: moments, a schedule, an average.
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      scheduler.set_iteration(i);
      for (Variable p : model->parameters()) {
        Tensor g = Tensor::empty(p.shape());
        fill_normal(g, 0.0, 1.0, noise);
        p.set_grad(g);
      }
      opt.step();
      ema.update(i);
    }
    checkpoint.iteration = steps;
  }
};

}  // namespace

TEST_CASE("Checkpoint: every kind of piece round trips bitwise, and saves the same bytes again",
          "[checkpoint]") {
  TempDir tmp("train_checkpoint");
  Run a(1);
  a.train(3);
  a.checkpoint.metadata = {{"run", "cgan"}, {"note", "a \"quoted\" value"}};
  const std::string path = tmp.file("a.safetensors");
  a.checkpoint.save(path);

  Run b(2);  // other weights, no optimizer state, another noise stream
  REQUIRE_FALSE(same_state(a.model->state_dict(), b.model->state_dict()));
  b.checkpoint.load(path);
  CHECK(same_state(a.model->state_dict(), b.model->state_dict()));
  CHECK(same_state(a.opt.state_dict(), b.opt.state_dict()));
  CHECK(b.opt.lr() == a.opt.lr());
  CHECK(same_state(a.scheduler.state_dict(), b.scheduler.state_dict()));
  CHECK(b.scheduler.iteration() == 2);
  REQUIRE(b.ema.tensors().size() == a.ema.tensors().size());
  for (size_t i = 0; i < a.ema.tensors().size(); ++i)
    CHECK(same_bytes(a.ema.tensors()[i], b.ema.tensors()[i]));
  CHECK(same_bytes(a.extra[0], b.extra[0]));
  CHECK(b.noise.state().seed == a.noise.state().seed);
  CHECK(b.noise.state().counter == a.noise.state().counter);
  CHECK(b.noise.normal() == a.noise.normal());
  CHECK(b.checkpoint.iteration == 3);
  CHECK(b.checkpoint.metadata == a.checkpoint.metadata);

  // Both continue alike, and b saves the very file a did.
  a.train(5);
  b.train(5);
  const std::string again = tmp.file("b.safetensors");
  a.checkpoint.save(path);
  b.checkpoint.save(again);
  CHECK(read_bytes(again) == read_bytes(path));
}

TEST_CASE("Checkpoint: a missing, unexpected or misshapen entry is named, and nothing changes",
          "[checkpoint]") {
  TempDir tmp("train_checkpoint");
  Run a(1);
  a.train(2);
  const std::string path = tmp.file("a.safetensors");
  Generator more(5);
  a.checkpoint.add_generator("more_noise", more);  // an entry the loaders below do not expect
  a.checkpoint.save(path);

  auto unchanged = [](Run& run, auto&& load) {
    const StateDict model = snapshot(run.model->state_dict()), opt = snapshot(run.opt.state_dict());
    const Tensor extra = run.extra[0].clone();
    const Generator::State noise = run.noise.state();
    load();
    return same_state(model, run.model->state_dict()) && same_state(opt, run.opt.state_dict()) &&
           same_bytes(extra, run.extra[0]) && run.noise.state().counter == noise.counter &&
           run.checkpoint.iteration == 0;
  };

  Run extra(2);
  CHECK(unchanged(extra, [&] {
    CHECK_THROWS_WITH(
        extra.checkpoint.load(path),
        Catch::Contains(path + ": does not fit this checkpoint: unexpected entry 'more_noise.state'"));
  }));

  Run missing(2);
  Generator other(6);
  missing.checkpoint.add_generator("more_noise", more);
  missing.checkpoint.add_generator("other_noise", other);  // not in the file
  CHECK(unchanged(missing, [&] {
    CHECK_THROWS_WITH(missing.checkpoint.load(path), Catch::Contains("'other_noise': missing entry 'state'"));
  }));

  Run misshapen(2, 5);  // 5 outputs, the file's model has 3
  misshapen.checkpoint.add_generator("more_noise", more);
  CHECK(unchanged(misshapen, [&] {
    CHECK_THROWS_WITH(
        misshapen.checkpoint.load(path),
        Catch::Contains("'model': load_state_dict into Linear(4, 5): entry 'weight' has shape [3, 4] in the "
                        "state dict but [5, 4] in the module") &&
            Catch::Contains("'optim': optim::Adam::load_state_dict: entry 'state.0.exp_avg' has shape "
                            "[3, 4]") &&
            Catch::Contains("'ema': entry '0' is float32[3, 4] on cpu, not float32[5, 4] on cpu"));
  }));
}

TEST_CASE("Checkpoint: names that would mix their entries, and reserved metadata, are refused",
          "[checkpoint]") {
  Run run(1);
  Generator g;
  CHECK_THROWS_WITH(run.checkpoint.add_generator("noise", g), Catch::Contains("'noise' is registered twice"));
  CHECK_THROWS_WITH(run.checkpoint.add_generator("optim.noise", g),
                    Catch::Contains("the names 'optim' and 'optim.noise' overlap"));
  CHECK_THROWS_WITH(run.checkpoint.add_generator("", g), Catch::Contains("a piece needs a name"));
  TempDir tmp("train_checkpoint");
  run.checkpoint.metadata["iteration"] = "3";
  CHECK_THROWS_WITH(run.checkpoint.save(tmp.file("x.safetensors")),
                    Catch::Contains("the metadata key 'iteration' is reserved"));
}

TEST_CASE("Checkpoint: a flipped byte is refused by the checksum, and nothing changes", "[checkpoint]") {
  TempDir tmp("train_checkpoint");
  Run a(1);
  a.train(2);
  const std::string path = tmp.file("a.safetensors");
  a.checkpoint.save(path);
  std::string bytes = read_bytes(path);
  bytes[bytes.size() - 5] ^= 0x10;  // inside the data section
  write_bytes(path, bytes);
  Run b(2);
  const StateDict before = snapshot(b.model->state_dict());
  CHECK_THROWS_WITH(b.checkpoint.load(path),
                    Catch::Contains(path + ": checksum mismatch") && Catch::Contains("the file is corrupt"));
  CHECK(same_state(before, b.model->state_dict()));
}

TEST_CASE("Checkpoint: a symbolic link planted at the path is never written through", "[checkpoint]") {
  namespace fs = std::filesystem;
  TempDir tmp("train_checkpoint");
  Run a(1);
  const std::string target = tmp.file("precious.txt");
  write_bytes(target, "keep me");

  // At the path itself: the save replaces the link with the checkpoint.
  const std::string path = tmp.file("a.safetensors");
  fs::create_symlink(target, path);
  a.checkpoint.save(path);
  CHECK(read_bytes(target) == "keep me");
  CHECK_FALSE(fs::is_symlink(path));
  Run b(2);
  b.checkpoint.load(path);
  CHECK(same_state(a.model->state_dict(), b.model->state_dict()));

  // At its temporary name: the link is replaced by a fresh file, its target untouched.
  const std::string other = tmp.file("b.safetensors");
  fs::create_symlink(target, other + ".tmp");
  a.checkpoint.save(other);
  CHECK(read_bytes(target) == "keep me");
  CHECK_FALSE(fs::is_symlink(other));
  CHECK_FALSE(fs::exists(other + ".tmp"));
  Run c(3);
  c.checkpoint.load(other);
  CHECK(same_state(a.model->state_dict(), c.model->state_dict()));
}

TEST_CASE("Checkpoint: rank 0 writes, every rank loads, and a rank that cannot is named", "[checkpoint]") {
  TempDir tmp("train_checkpoint");
  const std::string path = tmp.file("a.safetensors");
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> group) {
    Run run(group->rank() == 0 ? 1 : 2);
    if (group->rank() == 0) run.train(2);
    run.checkpoint.save(path, *group);  // rank 1 returns once rank 0's file is there
    Run fresh(3);
    fresh.checkpoint.load(path, *group);
    CHECK(fresh.checkpoint.iteration == 2);
    CHECK(fresh.opt.step_count(0) == 2);
  });
  CHECK_THROWS_WITH(
      dist::run_ranks(2,
                      [&](std::shared_ptr<dist::ProcessGroup> group) {
                        Run run(1, group->rank() == 1 ? 5 : 3);  // rank 1's model does not fit
                        run.checkpoint.load(path, *group);
                      }),
      Catch::Contains("rank(s) 1 cannot load it") || Catch::Contains("does not fit this checkpoint"));
}
