// The checkpointer: the newest complete checkpoint wins over newer torn or foreign files,
// each of which --resume names with its problem (and refuses to start when none is left),
// a checkpoint restores a run exactly (saved again, the bytes are the same), and one of
// another run, or of this run with a flag that shapes it changed, is refused with both
// values named.
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <set>

#include "models/gan.h"
#include "models/train/checkpointer.h"
#include "models/training/ema_weights.h"
#include "models/wrapped_gan.h"
#include "runtime/checkpoint.h"
#include "runtime/rng.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::models;
using namespace tandem::testing;

namespace {

// The flags of the run that writes the checkpoints in these tests.
TrainOptions flags() {
  TrainOptions o;
  o.data = "ring8";
  o.batch = 8;
  o.seed = 7;
  return o;
}

RunIdentity identity(const TrainOptions& o, int world_size = 2) {
  return {.world_size = world_size, .settings = run_settings(for_world_size(o, world_size), "mpi", "")};
}

const RunIdentity kRun = identity(flags());

WrappedGanOptions alone(double lr = 2e-4) {
  WrappedGanOptions o;
  o.wrap = WrapMode::none;
  o.lr = lr;
  return o;
}

// A GAN with its optimizers, moving average and checkpointer, as train() builds them.
struct Run {
  std::shared_ptr<GanModel> model;
  WrappedGan wrapped;
  training::EmaWeights ema;
  Checkpointer checkpointer;

  Run(const std::string& dir, const std::string& name, uint64_t weight_seed, RunIdentity run = kRun,
      double ema_decay = 0.9, double lr = 2e-4)
      : model(make_gan(GanConfig{.model = name, .seed = weight_seed})),
        wrapped(model, nullptr, alone(lr)),
        ema(model->generator->parameters(), ema_decay),
        checkpointer(dir, run, {*model, wrapped.opt_g(), wrapped.opt_d(), ema.tensors()}) {}

  void train(int64_t steps) {
    Generator gen(99);
    for (int64_t t = 0; t < steps; ++t) {
      Batch batch;
      batch.inputs = Tensor::empty({8, 2});
      fill_normal(batch.inputs, 0.0, 1.0, gen);
      batch.targets = Tensor::empty({8, model->noise_dim()});
      fill_normal(batch.targets, 0.0, 1.0, gen);
      wrapped.train_step(batch);
      ema.update(t);
    }
  }
};

std::string prefix_of(const std::string& head, size_t bytes) { return read_bytes(head).substr(0, bytes); }

// A resume from `path`, each newer file passed over named in `warnings`.
void check_chosen(const ResumeChoice& choice, const std::string& path,
                  const std::vector<std::string>& warnings) {
  CHECK(choice.path == path);
  CHECK(choice.refusal.empty());
  CHECK(choice.warnings == warnings);
}

// A refused resume: nothing chosen, nothing but the refusal, which names every file itself.
void check_refused(const ResumeChoice& choice, const std::string& refusal) {
  CHECK(choice.path.empty());
  CHECK(choice.refusal == refusal);
  CHECK(choice.warnings.empty());
}

}  // namespace

TEST_CASE("newest() picks the highest complete checkpoint, never a torn or foreign file", "[checkpointer]") {
  TempDir tmp("checkpointer");
  Run run(tmp.path.string(), "ring8-mlp", 1);
  CHECK_FALSE(run.checkpointer.newest().has_value());
  CHECK_FALSE(Run(tmp.file("missing"), "ring8-mlp", 1).checkpointer.newest().has_value());

  run.train(2);
  CHECK(run.checkpointer.save(10) == tmp.file("ckpt-000010.safetensors"));
  CHECK(run.checkpointer.save(200) == tmp.file("ckpt-000200.safetensors"));
  CHECK(run.checkpointer.save(30) == tmp.file("ckpt-000030.safetensors"));
  const std::string best = tmp.file("ckpt-000200.safetensors");
  CHECK(run.checkpointer.newest() == best);

  // A save cut short leaves a .tmp; a torn write under the final name; a foreign file; a
  // valid checkpoint under another prefix.
  write_bytes(tmp.file("ckpt-000300.safetensors.tmp"), prefix_of(best, 100));
  write_bytes(tmp.file("ckpt-000400.safetensors"), prefix_of(best, 100));
  write_bytes(tmp.file("ckpt-000500.safetensors"), "not a checkpoint");
  std::filesystem::copy_file(best, tmp.file("other-000900.safetensors"));
  CHECK(run.checkpointer.newest() == best);
}

TEST_CASE("scan() names every file that looks like a checkpoint and why it cannot be read",
          "[checkpointer]") {
  TempDir tmp("checkpointer");
  Run run(tmp.path.string(), "ring8-mlp", 1);
  const std::string good = run.checkpointer.save(200), older = run.checkpointer.save(30);
  write_bytes(tmp.file("ckpt-000300.safetensors.tmp"), prefix_of(good, 100));  // a save cut short: not listed
  write_bytes(tmp.file("ckpt-000400.safetensors"), prefix_of(good, 100));
  write_bytes(tmp.file("ckpt-000500.safetensors"), "not a checkpoint");
  std::filesystem::create_directory(tmp.file("ckpt-000600.safetensors"));
  std::filesystem::copy_file(good, tmp.file("other-000900.safetensors"));

  const std::vector<CheckpointFile> files = run.checkpointer.scan();
  REQUIRE(files.size() == 5);
  CHECK(files[0].path == tmp.file("ckpt-000600.safetensors"));
  CHECK(files[0].problem == tmp.file("ckpt-000600.safetensors") + ": not a regular file");
  CHECK(files[1].iteration == 500);
  CHECK_THAT(files[1].problem, Catch::StartsWith(tmp.file("ckpt-000500.safetensors") + ": "));
  CHECK_THAT(files[2].problem, Catch::StartsWith(tmp.file("ckpt-000400.safetensors") + ": truncated"));
  CHECK(files[3].path == good);
  CHECK(files[3].problem.empty());
  CHECK(files[4].path == older);
  CHECK(files[4].problem.empty());
}

TEST_CASE(
    "scan_for_resume() names damaged data as scan() names a damaged header, down to the first sound file",
    "[checkpointer]") {
  TempDir tmp("checkpointer");
  Run run(tmp.path.string(), "ring8-mlp", 1);
  const std::string newest = run.checkpointer.save(300), sound = run.checkpointer.save(200),
                    oldest = run.checkpointer.save(30);
  write_bytes(tmp.file("ckpt-000400.safetensors"), prefix_of(newest, 100));  // a damaged header
  for (const std::string& path : {newest, oldest}) {                         // a flipped data byte
    std::string bytes = read_bytes(path);
    bytes.back() = static_cast<char>(bytes.back() ^ 0x10);
    write_bytes(path, bytes);
  }
  const std::vector<CheckpointFile> files = run.checkpointer.scan_for_resume();
  REQUIRE(files.size() == 4);
  CHECK_THAT(files[0].problem, Catch::StartsWith(tmp.file("ckpt-000400.safetensors") + ": truncated"));
  CHECK(files[1].path == newest);
  CHECK_THAT(files[1].problem,
             Catch::StartsWith(newest + ": checksum mismatch") && Catch::EndsWith("the file is corrupt"));
  CHECK(files[2].path == sound);
  CHECK(files[2].problem.empty());
  CHECK(files[3].path == oldest);
  CHECK(files[3].problem.empty());                    // older than the one to resume from: not read
  CHECK(run.checkpointer.scan()[1].problem.empty());  // scan() reads headers only
}

TEST_CASE("resume stops at damaged newer checkpoints unless told to skip them, and refuses when none is left",
          "[checkpointer]") {
  const std::vector<CheckpointFile> torn = {
      {"d/ckpt-000500.safetensors", 500, "d/ckpt-000500.safetensors: truncated", nullptr},
      {"d/ckpt-000400.safetensors", 400, "d/ckpt-000400.safetensors: corrupt", nullptr}};
  std::vector<CheckpointFile> mixed = torn;
  mixed.push_back({"d/ckpt-000200.safetensors", 200, "", nullptr});
  mixed.push_back({"d/ckpt-000100.safetensors", 100, "d/ckpt-000100.safetensors: truncated", nullptr});
  mixed.push_back({"d/ckpt-000030.safetensors", 30, "", nullptr});

  for (bool allow_fresh : {false, true}) {
    // Damaged files newer than the newest readable one stop the run, each named with its
    // problem, and the way on ...
    check_refused(
        choose_resume(mixed, "d", allow_fresh, false),
        "--resume: d/ckpt-000500.safetensors: truncated; d/ckpt-000400.safetensors: corrupt. They are newer "
        "than d/ckpt-000200.safetensors, the newest checkpoint that can be read. Repair or move the damaged "
        "files away, or pass --resume-skip-damaged to resume from d/ckpt-000200.safetensors");
    // ... which the user may take: the newest readable one wins, each newer file named.
    const ResumeChoice choice = choose_resume(mixed, "d", allow_fresh, true);
    check_chosen(choice, "d/ckpt-000200.safetensors",
                 {"--resume skips d/ckpt-000500.safetensors: truncated",
                  "--resume skips d/ckpt-000400.safetensors: corrupt"});
    CHECK(choice.older == "d/ckpt-000030.safetensors");
  }
  // An older damaged file does not matter.
  check_chosen(choose_resume({mixed.begin() + 2, mixed.end()}, "d", false, false),
               "d/ckpt-000200.safetensors", {});

  // Files, none readable: refused, naming each file and problem, and the way out.
  check_refused(
      choose_resume(torn, "d", false, false),
      "--resume: no checkpoint in d can be read (d/ckpt-000500.safetensors: truncated; "
      "d/ckpt-000400.safetensors: corrupt). Repair or move them away, or pass --resume-allow-fresh to start "
      "from iteration 0");

  // ... unless the user says so: a fresh start, with each file named.
  ResumeChoice fresh = choose_resume(torn, "d", true, false);
  CHECK(fresh.path.empty());
  CHECK(fresh.refusal.empty());
  REQUIRE(fresh.warnings.size() == 3);
  CHECK(fresh.warnings[0] == "--resume skips d/ckpt-000500.safetensors: truncated");
  CHECK_THAT(fresh.warnings[2],
             Catch::StartsWith("--resume-allow-fresh: no checkpoint in d can be read; starting "
                               "from iteration 0"));

  // No checkpoint at all (a typo in --out?): refused, naming the directory and the way out ...
  check_refused(
      choose_resume({}, "d", false, false),
      "--resume: no checkpoint in d (no ckpt-*.safetensors file there). Check the --out path, or pass "
      "--resume-allow-fresh to start from iteration 0");
  // ... unless the user says so, and then it is said on stderr, with the directory.
  ResumeChoice none_fresh = choose_resume({}, "d", true, false);
  CHECK(none_fresh.path.empty());
  CHECK(none_fresh.refusal.empty());
  CHECK(none_fresh.warnings ==
        std::vector<std::string>{"--resume-allow-fresh: no checkpoint in d; starting from iteration 0"});
}

TEST_CASE("a checkpoint restores a run exactly: saved again it is byte-identical", "[checkpointer]") {
  TempDir first("checkpointer"), second("checkpointer");
  Run trained(first.path.string(), "ring8-mlp", 1);
  trained.train(3);
  const std::string saved = trained.checkpointer.save(3);

  // The file as any safetensors reader sees it.
  SafetensorsFile file = load_safetensors(saved);
  CHECK(file.metadata ==
        std::map<std::string, std::string>{{"model", "ring8-mlp"},  {"iteration", "3"},
                                           {"world_size", "2"},     {"data", "ring8"},
                                           {"width", "0"},          {"channels", "1"},
                                           {"batch", "8"},          {"global_batch", "16"},
                                           {"lr", "0.0002"},        {"lr_schedule", "constant"},
                                           {"clip_grad", "0"},      {"clip_grad_type", "2"},
                                           {"accumulate", "1"},     {"seed", "7"},
                                           {"dynamic", "off"},      {"loss", "ns"},
                                           {"gp_lambda", "10"},     {"n_critic", "1"},
                                           {"r1_gamma", "0"},       {"r1_every", "1"},
                                           {"r2_gamma", "0"},       {"pl_weight", "0"},
                                           {"data_fraction", "1"},  {"augment", "off"},
                                           {"augment_target", "0"}, {"augment_kimg", "100"},
                                           {"precision", "fp32"},   {"low_precision_res", "all"}});
  std::set<std::string> groups;
  for (const auto& [name, t] : file.tensors)
    groups.insert(name.substr(0, name.find('.', name.find('.') + 1)));
  CHECK(groups == std::set<std::string>{"ema.0", "ema.1", "ema.2", "ema.3", "ema.4", "ema.5",
                                        "model.generator", "model.discriminator", "optim.generator",
                                        "optim.discriminator"});

  // A fresh run with other weights and untouched optimizers takes it all and writes the same bytes.
  Run fresh(second.path.string(), "ring8-mlp", 2);
  REQUIRE(fresh.model->parameters()[0].data().to_vector() !=
          trained.model->parameters()[0].data().to_vector());
  CHECK(fresh.checkpointer.load(saved) == 3);
  const std::string again = fresh.checkpointer.save(3);
  CHECK(again != saved);
  CHECK(read_bytes(again) == read_bytes(saved));
  for (size_t i = 0; i < trained.model->parameters().size(); ++i) {
    CHECK(fresh.model->parameters()[i].data().to_vector() ==
          trained.model->parameters()[i].data().to_vector());
  }
}

TEST_CASE("with --global-batch a checkpoint resumes at another world size, without it the refusal names it",
          "[checkpointer][global_batch]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  // The identities train() gives: the options at their world size, elastic with --global-batch.
  auto at = [](int64_t global_batch, int world_size, bool elastic) {
    TrainOptions o = flags();
    o.global_batch = elastic ? global_batch : 0;
    if (!elastic) o.batch = global_batch / world_size;
    return RunIdentity{.world_size = world_size,
                       .elastic = elastic,
                       .settings = run_settings(for_world_size(o, world_size), "mpi", "")};
  };
  Run writer(tmp.path.string(), "ring8-mlp", 1, at(12, 2, true));
  writer.train(2);
  const std::string path = writer.checkpointer.save(4);
  for (int world : {1, 2, 3, 4}) {
    INFO("resumed at " << world << " ranks");
    Run reader(elsewhere.path.string(), "ring8-mlp", 2, at(12, world, true));
    CHECK(reader.checkpointer.load(path) == 4);
    for (size_t i = 0; i < reader.model->parameters().size(); ++i)
      CHECK(reader.model->parameters()[i].data().to_vector() ==
            writer.model->parameters()[i].data().to_vector());
  }
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1, at(12, 3, false)).checkpointer.load(path),
                    Catch::Contains(path + ": written by a run of 2 ranks; resuming on 3 ranks") &&
                        Catch::Contains("or pass --global-batch 12 (the global batch it was written with)"));
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1, at(9, 3, true)).checkpointer.load(path),
      Catch::Contains(path + ": written with --global-batch 12, this run has --global-batch 9"));
  // Without --global-batch the same world size resumes as ever, its global batch compared too.
  CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1, at(12, 2, false)).checkpointer.load(path) == 4);
  // A checkpoint that does not record its global batch stays at its world size.
  RunIdentity unrecorded = at(12, 2, true);
  std::erase_if(unrecorded.settings, [](const RunSetting& s) { return s.flag == "--global-batch"; });
  const std::string old = Run(elsewhere.path.string(), "ring8-mlp", 1, unrecorded).checkpointer.save(6);
  CHECK_THROWS_WITH(Run(tmp.path.string(), "ring8-mlp", 1, at(12, 3, true)).checkpointer.load(old),
                    Catch::Contains(old + ": written by a run of 2 ranks before checkpoints recorded the "
                                          "global batch; resume it with mpirun -np 2"));
}

TEST_CASE("a checkpoint of another run is refused, naming both values", "[checkpointer][errors]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  Run writer(tmp.path.string(), "ring8-mlp", 1);
  const std::string path = writer.checkpointer.save(4);

  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "mlp", 1).checkpointer.load(path),
                    Catch::Contains(path + ": checkpoint of model 'ring8-mlp', but this run trains 'mlp'"));
  RunIdentity wider = kRun;
  wider.world_size = 3;
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1, wider).checkpointer.load(path),
                    Catch::Contains(path + ": written by a run of 2 ranks; resuming on 3 ranks") &&
                        Catch::Contains("Resume with mpirun -np 2, or pass --global-batch 16 (the global "
                                        "batch it was written with) to resume at another number of ranks"));
  TrainOptions smaller = flags();
  smaller.batch = 4;
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1, identity(smaller)).checkpointer.load(path),
      Catch::Contains(path + ": written with --batch 8 --global-batch 16, this run has --batch 4 "
                             "--global-batch 8"));

  Run without_average(elsewhere.path.string(), "ring8-mlp", 1, kRun, 0.0);
  const std::string no_ema = without_average.checkpointer.save(5);
  CHECK_THROWS_WITH(Run(tmp.path.string(), "ring8-mlp", 1).checkpointer.load(no_ema),
                    Catch::Contains(no_ema + ": does not fit this model: no moving-average entry 'ema.0'") &&
                        Catch::Contains("(written with --ema-decay 0?)"));

  // Lies inside a well-formed file: metadata that is not a plain integer, non-finite data,
  // optimizer state that is missing. Each is refused naming the file and the entry.
  Run trained(tmp.path.string(), "ring8-mlp", 1);
  trained.train(2);  // so that the optimizers hold moments
  const SafetensorsFile good = load_safetensors(trained.checkpointer.save(2));
  auto mutant = [&](const std::string& name, auto&& mutate) {
    SafetensorsFile m = good;
    mutate(m);
    const std::string file = tmp.file(name + ".safetensors");
    save_safetensors(file, m.tensors, m.metadata);
    return file;
  };
  for (const char* bad : {"2e2", "2abc", "-5", "abc", ""}) {
    const std::string file = mutant("iteration", [&](SafetensorsFile& m) { m.metadata["iteration"] = bad; });
    CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(file),
                      Catch::Contains(file + ": metadata 'iteration' is '" + bad + "', not an integer >= 0"));
  }
  const std::string nan_weight = mutant("nan_weight", [](SafetensorsFile& m) {
    Tensor t = m.tensors.at("model.generator.0.weight").clone();
    t.data<float>()[3] = NAN;
    m.tensors["model.generator.0.weight"] = t;
  });
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(nan_weight),
      Catch::Contains(nan_weight + ": tensor 'model.generator.0.weight' holds nan at element 3"));
  const std::string nan_moment = mutant("nan_moment", [](SafetensorsFile& m) {
    Tensor t = m.tensors.at("optim.discriminator.state.1.exp_avg").clone();
    t.data<float>()[0] = INFINITY;
    m.tensors["optim.discriminator.state.1.exp_avg"] = t;
  });
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(nan_moment),
                    Catch::Contains(nan_moment + ": does not fit this model") &&
                        Catch::Contains("'state.1.exp_avg' holds NaN or Inf"));
  const std::string no_moment =
      mutant("no_moment", [](SafetensorsFile& m) { m.tensors.erase("optim.generator.state.0.exp_avg_sq"); });
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(no_moment),
                    Catch::Contains(no_moment + ": does not fit this model") &&
                        Catch::Contains("no entry 'state.0.exp_avg_sq'"));

  // A tensor rewritten in another dtype would be converted on load: refused instead, for
  // the model, an optimizer moment and the average alike.
  for (const char* name : {"model.generator.0.weight", "optim.generator.state.0.exp_avg", "ema.1"}) {
    const std::string file =
        mutant("dtype", [&](SafetensorsFile& m) { m.tensors[name] = m.tensors.at(name).to(DType::f16); });
    CHECK_THROWS_WITH(
        Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(file),
        Catch::Contains(file + ": tensor '" + name + "' is float16, not float32 as this run keeps it"));
  }

  const std::string foreign = tmp.file("foreign.safetensors");
  save_safetensors(foreign, {{"x", Tensor::zeros({2})}});
  CHECK_THROWS_WITH(
      writer.checkpointer.load(foreign),
      Catch::Contains(foreign + ": not a tandem-train checkpoint (no 'model' in its metadata)"));
}

TEST_CASE("a resume that changes a flag shaping the run is refused by name, the others are honoured",
          "[checkpointer][errors]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  Run writer(tmp.path.string(), "ring8-mlp", 1);
  writer.train(2);
  const std::string path = writer.checkpointer.save(4);
  auto resume_with = [&](const TrainOptions& o, double lr = 2e-4) {
    return Run(elsewhere.path.string(), "ring8-mlp", 1, identity(o), 0.9, lr).checkpointer.load(path);
  };

  // Each differing flag is named with both values, and how to resume.
  TrainOptions changed = flags();
  changed.lr = 1e-3;
  changed.seed = 8;
  changed.loss = GanLoss::hinge;
  CHECK_THROWS_WITH(
      resume_with(changed, 1e-3),
      Catch::Contains(path + ": written with --lr 0.0002 --seed 7 --loss ns, this run has --lr 0.001 "
                             "--seed 8 --loss hinge. A resume continues the same run: resume with "
                             "--lr 0.0002 --seed 7 --loss ns, or start a new run in another --out"));
  TrainOptions penalised = flags();
  penalised.n_critic = 5;
  penalised.r1_gamma = 10;
  penalised.r1_every = 4;
  penalised.r2_gamma = 10;
  CHECK_THROWS_WITH(resume_with(penalised),
                    Catch::Contains("written with --n-critic 1 --r1-gamma 0 --r1-every 1 --r2-gamma 0, this "
                                    "run has --n-critic 5 --r1-gamma 10 --r1-every 4 --r2-gamma 10"));
  TrainOptions relativistic = flags();
  relativistic.loss = GanLoss::relativistic;
  CHECK_THROWS_WITH(resume_with(relativistic),
                    Catch::Contains("written with --loss ns, this run has --loss rpgan"));
  TrainOptions dynamic = flags();
  dynamic.dynamic = true;
  CHECK_THROWS_WITH(resume_with(dynamic),
                    Catch::Contains("written with no --dynamic, this run has --dynamic"));
  TrainOptions other_data = flags();
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1,
          {.world_size = 2,
           .settings = run_settings(for_world_size(other_data, 2), "mpi", "9 images [1, 2, 2]")})
          .checkpointer.load(path),
      Catch::Contains("written with --data ring8, this run has --data ring8 (9 images [1, 2, 2])"));
  // pggan's stage length, resolved from --iters when not given, is kept: a longer --iters
  // alone would change the stages. (The checkpointer records settings whatever the model.)
  TrainOptions pggan = flags();
  pggan.model = "pggan";
  pggan.iters = 30;
  const std::string staged = Run(tmp.path.string(), "ring8-mlp", 1, identity(pggan)).checkpointer.save(6);
  pggan.iters = 60;
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1, identity(pggan)).checkpointer.load(staged),
      Catch::Contains(staged + ": written with --pggan-stage-iters 10, this run has "
                               "--pggan-stage-iters 20. A resume continues the same run: resume "
                               "with --pggan-stage-iters 10"));
  pggan.pggan_stage_iters = 10;
  CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1, identity(pggan)).checkpointer.load(staged) == 6);

  // Flags that only steer the run take effect.
  TrainOptions steered = flags();
  steered.iters = 5000;
  steered.wrap = WrapMode::separate;
  steered.bucket_cap_mb = 1;
  steered.ema_decay = 0.5;
  steered.ckpt_every = 7;
  steered.log_every = 3;
  steered.on_nonfinite = OnNonFinite::skip;
  steered.check_replicas_every = 10;
  steered.device = DeviceKind::cuda;
  CHECK(resume_with(steered) == 4);

  // A checkpoint written before lr, data, dynamic and loss were recorded still resumes; its
  // learning rate, held by the optimizer state, must still be this run's --lr.
  SafetensorsFile old = load_safetensors(path);
  for (const char* key : {"data", "lr", "dynamic", "loss"}) REQUIRE(old.metadata.erase(key) == 1);
  const std::string old_path = tmp.file("old.safetensors");
  save_safetensors(old_path, old.tensors, old.metadata);
  Run old_flags(elsewhere.path.string(), "ring8-mlp", 1);
  CHECK(old_flags.checkpointer.load(old_path) == 4);
  CHECK(old_flags.wrapped.opt_g().lr() == 2e-4);
  TrainOptions faster = flags();
  faster.lr = 1e-3;
  CHECK_THROWS_WITH(
      Run(elsewhere.path.string(), "ring8-mlp", 1, identity(faster), 0.9, 1e-3).checkpointer.load(old_path),
      Catch::Contains(old_path + ": written with --lr 0.0002 (optim.generator.lr), this run has --lr "
                                 "0.001. A resume continues the same run: resume with --lr 0.0002"));
}

TEST_CASE("lazy R1's correction is kept on resume; a checkpoint from before it was recorded ran without it",
          "[checkpointer][errors]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  TrainOptions lazy = flags();
  lazy.r1_gamma = 10;
  lazy.r1_every = 4;
  const std::string path = Run(tmp.path.string(), "ring8-mlp", 1, identity(lazy)).checkpointer.save(4);
  CHECK(load_safetensors(path).metadata.at("lazy_r1_correction") == "on");
  TrainOptions off = lazy;
  off.lazy_r1_correction = false;
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1, identity(off)).checkpointer.load(path),
                    Catch::Contains(path + ": written with --lazy-r1-correction on, this run has "
                                           "--lazy-r1-correction off"));
  CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1, identity(lazy)).checkpointer.load(path) == 4);

  // Without the field: the run was trained uncorrected, so only "off" continues it.
  SafetensorsFile old = load_safetensors(path);
  REQUIRE(old.metadata.erase("lazy_r1_correction") == 1);
  const std::string old_path = tmp.file("old.safetensors");
  save_safetensors(old_path, old.tensors, old.metadata);
  CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1, identity(lazy)).checkpointer.load(old_path),
                    Catch::Contains(old_path + ": written with --lazy-r1-correction off, this run has "
                                               "--lazy-r1-correction on. A resume continues the same run: "
                                               "resume with --lazy-r1-correction off"));
  CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1, identity(off)).checkpointer.load(old_path) == 4);
  // A run without lazy R1 neither records nor compares it.
  const std::string plain = Run(tmp.path.string(), "ring8-mlp", 1).checkpointer.save(6);
  CHECK(load_safetensors(plain).metadata.count("lazy_r1_correction") == 0);
  CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1).checkpointer.load(plain) == 6);
}

TEST_CASE("with a learning-rate schedule, a checkpoint's rate must be the schedule's at its iteration",
          "[checkpointer][errors]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  // A run as train() builds it, its schedule set after each iteration.
  struct Scheduled {
    Run run;
    optim::LrScheduler scheduler;
    Checkpointer checkpointer;
    Scheduled(const std::string& dir, const std::string& spec)
        : run(dir, "ring8-mlp", 1, with_schedule(spec)),
          scheduler({&run.wrapped.opt_g(), &run.wrapped.opt_d()}, optim::parse_lr_schedule(spec)),
          checkpointer(
              dir, with_schedule(spec),
              {*run.model, run.wrapped.opt_g(), run.wrapped.opt_d(), run.ema.tensors(), &scheduler}) {}
    static RunIdentity with_schedule(const std::string& spec) {
      TrainOptions o = flags();
      o.lr_schedule = optim::parse_lr_schedule(spec);
      return identity(o);
    }
  };
  Scheduled writer(tmp.path.string(), "step:2:0.5");
  writer.run.train(3);
  writer.scheduler.set_iteration(3);
  const std::string path = writer.checkpointer.save(3);  // rate 2e-4 * 0.5

  Scheduled same(elsewhere.path.string(), "step:2:0.5");
  CHECK(same.run.wrapped.opt_g().lr() == 2e-4);  // iteration 0's
  CHECK(same.checkpointer.load(path) == 3);
  CHECK(same.run.wrapped.opt_g().lr() == 1e-4);
  CHECK(same.run.wrapped.opt_d().lr() == 1e-4);

  // Another schedule is named by the metadata; a checkpoint without that key (older) by its rate.
  CHECK_THROWS_WITH(
      Scheduled(elsewhere.path.string(), "step:4:0.5").checkpointer.load(path),
      Catch::Contains("written with --lr-schedule step:2:0.5, this run has --lr-schedule step:4:0.5"));
  SafetensorsFile old = load_safetensors(path);
  REQUIRE(old.metadata.erase("lr_schedule") == 1);
  const std::string old_path = tmp.file("old.safetensors");
  save_safetensors(old_path, old.tensors, old.metadata);
  CHECK_THROWS_WITH(
      Scheduled(elsewhere.path.string(), "step:4:0.5").checkpointer.load(old_path),
      Catch::Contains(old_path + ": its learning rate at iteration 3 is 0.0001 (optim.generator.lr), "
                                 "but this run's --lr and --lr-schedule step:4:0.5 give 0.0002 there"));
  CHECK(Scheduled(elsewhere.path.string(), "step:2:0.5").checkpointer.load(old_path) == 3);
}

TEST_CASE("load_checkpoint_generator gives the checkpoint's generator with its moving average as weights",
          "[checkpointer][fid]") {
  TempDir tmp("checkpoint-generator");
  Run run(tmp.path.string(), "ring8-mlp", 1);
  run.train(3);
  const std::string path = run.checkpointer.save(3);
  const CheckpointGenerator loaded = load_checkpoint_generator(path);
  REQUIRE(loaded.model->type_name() == "ring8-mlp");
  CHECK(loaded.from_average);
  const std::vector<Variable> g = loaded.model->generator->parameters(),
                              live = run.model->generator->parameters();
  REQUIRE(g.size() == run.ema.tensors().size());
  for (size_t k = 0; k < g.size(); ++k) {
    INFO("generator parameter " << k);
    CHECK(g[k].data().to_vector() == run.ema.tensors()[k].to_vector());
    CHECK(g[k].data().to_vector() != live[k].data().to_vector());  // the average, not the live weights
  }
  // D is the checkpoint's, as trained.
  const std::vector<Variable> d = loaded.model->discriminator->parameters(),
                              d_live = run.model->discriminator->parameters();
  for (size_t k = 0; k < d.size(); ++k) CHECK(d[k].data().to_vector() == d_live[k].data().to_vector());

  // A file that is no tandem-train checkpoint is named.
  const std::string foreign = tmp.file("foreign.safetensors");
  save_safetensors(foreign, {{"x", Tensor::zeros({2})}}, {});
  CHECK_THROWS_WITH(load_checkpoint_generator(foreign),
                    Catch::Contains(foreign) && Catch::Contains("not a tandem-train checkpoint"));
}

TEST_CASE(
    "every setting's resume rule is what the checkpointer applies: changed alone, a kept one is "
    "refused by name and any other is honoured",
    "[checkpointer][resume]") {
  TempDir tmp("checkpointer"), elsewhere("checkpointer");
  // Two runs that between them make every kept_when condition hold: lazy R1, path length,
  // stylegan2's style mixing; pggan's stage length.
  for (const char* model : {"stylegan2", "pggan"}) {
    TrainOptions o = flags();
    o.model = model;
    o.r1_gamma = 1;
    o.r1_every = 4;
    o.pl_weight = 2;
    const RunIdentity run = identity(o);
    Run writer(tmp.path.string(), "ring8-mlp", 1, run);
    const std::string path = writer.checkpointer.save(4);
    for (size_t i = 0; i < run.settings.size(); ++i) {
      RunIdentity changed = run;
      RunSetting& s = changed.settings[i];
      if (s.flag == "--model") continue;  // kept by its own rule: the checkpoint's model (checked above)
      s.value = s.is_switch ? (s.value == "on" ? "off" : "on") : s.value + "1";
      INFO("--model " << model << ", " << s.flag << " changed alone to " << s.value);
      if (s.kept_on_resume) {
        CHECK_THROWS_WITH(Run(elsewhere.path.string(), "ring8-mlp", 1, changed).checkpointer.load(path),
                          Catch::Contains("this run has " + s.as_written() + "."));
      } else {
        CHECK(Run(elsewhere.path.string(), "ring8-mlp", 1, changed).checkpointer.load(path) == 4);
      }
    }
  }
}
