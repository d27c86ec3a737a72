// The run's settings: every flag but the per-node paths, in canonical text, and which ones a
// resume keeps.
#include <catch2/catch.hpp>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "models/gan.h"
#include "models/train/run_settings.h"

using namespace tandem::models;

namespace {

std::vector<RunSetting> settings_of(const std::vector<std::string>& args, const std::string& identity = "") {
  return run_settings(parse_train_options(args), "mpi", identity);
}

const RunSetting& find(const std::vector<RunSetting>& settings, const std::string& flag) {
  for (const RunSetting& s : settings) {
    if (s.flag == flag) return s;
  }
  FAIL("no setting " << flag);
  throw;
}

// Whether `text` names `flag` whole: "--augment-kimg" does not name "--augment".
bool names_flag(const std::string& text, const std::string& flag) {
  for (size_t at = text.find(flag); at != std::string::npos; at = text.find(flag, at + 1)) {
    const size_t end = at + flag.size();
    if (end == text.size() || !(std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '-'))
      return true;
  }
  return false;
}

std::string resume_help() {
  TrainOptions defaults;
  const tandem::CommandLine table = train_command_line(defaults);
  for (const tandem::CommandLine::Flag& flag : table.flags()) {
    if (flag.name == "--resume") return flag.help;
  }
  FAIL("no --resume in the flag table");
  throw;
}

}  // namespace

TEST_CASE("the settings are every flag of --help but the per-node paths, once each", "[settings]") {
  std::set<std::string> help_flags;
  TrainOptions defaults;
  std::istringstream lines(train_command_line(defaults).usage());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("  --", 0) == 0) help_flags.insert(line.substr(2, line.find(' ', 2) - 2));
  }
  REQUIRE(help_flags.count("--lr") == 1);
  for (const char* per_node : {"--out", "--data-dir", "--help"}) REQUIRE(help_flags.erase(per_node) == 1);

  std::set<std::string> listed;
  for (const RunSetting& s : settings_of({})) CHECK(listed.insert(s.flag).second);
  CHECK(listed == help_flags);
}

TEST_CASE("values are canonical: spellings of one value give one text", "[settings]") {
  CHECK(find(settings_of({"--lr", "2e-4"}), "--lr").value == "0.0002");
  CHECK(find(settings_of({"--lr", "0.00020"}), "--lr").value == "0.0002");
  CHECK(find(settings_of({"--lr", "1e-5"}), "--lr").value == "1e-05");
  CHECK(find(settings_of({"--lr", "0.1"}), "--lr").value == "0.1");  // not 0.10000000000000001
  CHECK(find(settings_of({"--bucket-cap-mb", "25.0"}), "--bucket-cap-mb").value == "25");
  CHECK(canonical_number(1.0 / 3.0) == "0.3333333333333333");
  CHECK(canonical_number(10) == "10");  // not %g's "1e+01"
  CHECK(canonical_number(0) == "0");
  CHECK(canonical_number(-250) == "-250");
  CHECK(canonical_number(2.5e20) == "2.5e+20");
  CHECK(std::stod(canonical_number(1.0 / 3.0)) == 1.0 / 3.0);

  const std::vector<RunSetting> s =
      settings_of({"--model", "mlp", "--dynamic", "--seed", "12"}, "60000 images");
  CHECK(find(s, "--data").value == "fashion-mnist (60000 images)");
  CHECK(find(s, "--dynamic").value == "on");
  CHECK(find(s, "--dynamic").as_written() == "--dynamic");
  CHECK(find(s, "--prepare").as_written() == "no --prepare");
  CHECK(find(s, "--sync-bn").as_written() == "no --sync-bn");  // the ranks must agree on it
  CHECK(find(s, "--seed").as_written() == "--seed 12");
  CHECK(find(s, "--backend").value == "mpi");  // as resolved, not "auto"
  CHECK(find(s, "--data").value == "fashion-mnist (60000 images)");
  CHECK(find(settings_of({}), "--data").value == "ring8");
  CHECK(find(s, "--pggan-stage-iters").metadata_key() == "pggan_stage_iters");
  CHECK(find(s, "--lr").metadata_key() == "lr");
  // wgan-gp's defaults as resolved: 5 critic steps, lr 1e-4.
  const std::vector<RunSetting> wgan = settings_of({"--loss", "wgan-gp", "--r1-gamma", "0.5"});
  CHECK(find(wgan, "--n-critic").value == "5");
  CHECK(find(wgan, "--lr").value == "0.0001");
  CHECK(find(wgan, "--gp-lambda").value == "10");
  CHECK(find(wgan, "--r1-gamma").value == "0.5");
  CHECK(find(wgan, "--r1-every").metadata_key() == "r1_every");
}

TEST_CASE("a resume keeps the settings that shape the trajectory, pggan's stage length resolved",
          "[settings]") {
  std::set<std::string> kept;
  for (const RunSetting& s : settings_of({"--model", "mlp"})) {
    if (s.kept_on_resume) kept.insert(s.flag);
  }
  CHECK(kept ==
        std::set<std::string>{
            "--data",     "--channels",       "--width",        "--batch",          "--global-batch",
            "--lr",       "--lr-schedule",    "--clip-grad",    "--clip-grad-type", "--accumulate",
            "--seed",     "--dynamic",        "--loss",         "--gp-lambda",      "--n-critic",
            "--r1-gamma", "--r1-every",       "--r2-gamma",     "--pl-weight",      "--data-fraction",
            "--augment",  "--augment-target", "--augment-kimg", "--precision",      "--low-precision-res"});
  // The run's global batch, with --global-batch or without: what its checkpoints record.
  CHECK(find(run_settings(for_world_size(parse_train_options({"--batch", "8"}), 3), "mpi", ""),
             "--global-batch")
            .value == "24");
  CHECK(find(run_settings(for_world_size(parse_train_options({"--global-batch", "24"}), 3), "mpi", ""),
             "--batch")
            .value == "8");
  // A schedule in its canonical form: two spellings of one schedule agree.
  CHECK(find(settings_of({"--lr-schedule", "warmup:5+step:10"}), "--lr-schedule").value ==
        find(settings_of({"--lr-schedule", "step:10:0.1+warmup:5:0.001"}), "--lr-schedule").value);
  CHECK(find(settings_of({"--detect-anomalous-params"}), "--detect-anomalous-params").as_written() ==
        "--detect-anomalous-params");

  const std::vector<RunSetting> pggan = settings_of({"--model", "pggan", "--iters", "90"});
  CHECK(find(pggan, "--pggan-stage-iters").kept_on_resume);
  CHECK(find(pggan, "--pggan-stage-iters").value == "30");
  CHECK(find(settings_of({"--model", "pggan", "--iters", "90", "--pggan-stage-iters", "7"}),
             "--pggan-stage-iters")
            .value == "7");
  CHECK(find(settings_of({"--model", "mlp", "--iters", "90"}), "--pggan-stage-iters").value == "0");

  // Lazy R1's correction shapes D's updates only under lazy R1; before it was recorded, runs
  // trained without it.
  const RunSetting lazy = find(settings_of({"--r1-gamma", "1", "--r1-every", "4"}), "--lazy-r1-correction");
  CHECK((lazy.kept_on_resume && lazy.value == "on" && value_when_absent(lazy) == "off"));
  CHECK(find(settings_of({"--r1-gamma", "1", "--r1-every", "4", "--lazy-r1-correction", "off"}),
             "--lazy-r1-correction")
            .as_written() == "--lazy-r1-correction off");
  CHECK_FALSE(find(settings_of({"--r1-gamma", "1"}), "--lazy-r1-correction").kept_on_resume);
  CHECK(value_when_absent(find(settings_of({}), "--lr")).empty());
  // R2 (with the relativistic loss, R3GAN's objective): before it was recorded, runs trained
  // without it.
  const std::vector<RunSetting> r3gan =
      settings_of({"--loss", "rpgan", "--r1-gamma", "0.5", "--r2-gamma", "0.5"});
  CHECK(find(r3gan, "--loss").value == "rpgan");
  CHECK(find(r3gan, "--r2-gamma").as_written() == "--r2-gamma 0.5");
  CHECK(find(r3gan, "--r2-gamma").metadata_key() == "r2_gamma");
  CHECK(value_when_absent(find(r3gan, "--r2-gamma")) == "0");
  // Style mixing (stylegan2's): before it was recorded, stylegan2 trained without it.
  const RunSetting mixing = find(settings_of({"--model", "stylegan2"}), "--style-mixing");
  CHECK((mixing.kept_on_resume && mixing.value == "0.9" && value_when_absent(mixing) == "0"));
  CHECK_FALSE(find(settings_of({"--model", "dcgan"}), "--style-mixing").kept_on_resume);
}

TEST_CASE("the help of --resume names every setting some model keeps on resume, with its condition",
          "[settings][resume]") {
  const std::string help = resume_help();
  std::set<std::string> kept_somewhere;
  for (const std::string& model : gan_model_names()) {
    // The objective flags on, so that what is kept only with them is kept: lazy R1 (and
    // stylegan2's path length, on by default).
    std::vector<std::string> args = {"--model", model};
    if (model != "stylegan2") args.insert(args.end(), {"--r1-gamma", "1", "--r1-every", "4"});
    for (const RunSetting& s : settings_of(args)) {
      if (!s.kept_on_resume) continue;
      INFO("--model " << model << " keeps " << s.flag << " on resume; --resume's help: " << help);
      kept_somewhere.insert(s.flag);
      CHECK(names_flag(help, s.flag));
      if (s.on_resume == OnResume::kept_when) CHECK(names_flag(help, s.flag + " (" + s.resume_note));
    }
  }
  // The conditional ones were reached.
  for (const char* flag : {"--pl-every", "--pl-decay", "--pl-batch-shrink", "--style-mixing",
                           "--lazy-r1-correction", "--pggan-stage-iters"}) {
    CHECK(kept_somewhere.count(flag) == 1);
  }
  CHECK(names_flag(help, "--pl-every (with --pl-weight)"));
}

TEST_CASE("each flag's help says whether a resume keeps it, from the settings' table", "[settings][resume]") {
  TrainOptions defaults;
  const tandem::CommandLine table = train_command_line(defaults);
  std::map<std::string, std::string> help;
  for (const tandem::CommandLine::Flag& f : table.flags()) help[f.name] = f.help;
  for (const RunSetting& s : run_settings(TrainOptions{}, "mpi", "")) {
    INFO(s.flag << ": " << help[s.flag]);
    const bool says_kept = help[s.flag].find(". Kept on resume") != std::string::npos;
    CHECK(says_kept == (s.on_resume != OnResume::may_change || s.flag == "--model"));
    if (s.on_resume == OnResume::kept_when)
      CHECK(names_flag(help[s.flag], "Kept on resume (" + s.resume_note));
  }
  CHECK(help["--out"].find("May differ between ranks") != std::string::npos);
  CHECK(help["--data-dir"].find("May differ between ranks") != std::string::npos);
}
