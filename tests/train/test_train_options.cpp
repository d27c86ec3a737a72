// tandem-train's flags: parsing, and usage errors that name the flag (exit code 2).
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "models/train/train_options.h"

using namespace tandem::models;

TEST_CASE("flags parse in both spellings with sane defaults", "[options]") {
  TrainOptions o =
      parse_train_options({"--model", "mlp", "--iters=50", "--batch", "32", "--dynamic", "--wrap=separate"});
  CHECK(o.model == "mlp");
  CHECK(o.data == "fashion-mnist");
  CHECK(o.iters == 50);
  CHECK(o.batch == 32);
  CHECK(o.dynamic);
  CHECK(o.wrap == WrapMode::separate);
  TrainOptions d = parse_train_options({});
  CHECK(d.model == "ring8-mlp");
  CHECK(d.data == "ring8");
  CHECK(d.wrap == WrapMode::whole);
}

TEST_CASE("bad flags are usage errors naming the flag", "[options][errors]") {
  CHECK_THROWS_WITH(parse_train_options({"--bogus"}), Catch::Contains("unknown flag '--bogus'"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "0"}),
                    Catch::Contains("--batch must be at least 1, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "-3"}),
                    Catch::Contains("--batch must be at least 1, got -3"));
  CHECK_THROWS_WITH(parse_train_options({"--batch=-3"}),
                    Catch::Contains("--batch must be at least 1, got -3"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "abc"}),
                    Catch::Contains("--batch needs an integer, got 'abc'"));
  CHECK_THROWS_WITH(parse_train_options({"--iters"}), Catch::Contains("--iters needs a value"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "vae"}), Catch::Contains("--model must be one of"));
  for (const char* bad : {"-1", "0", "inf", "nan", "1e999"}) {
    CHECK_THROWS_WITH(parse_train_options({"--lr", bad}), Catch::Contains("--lr") && Catch::Contains(bad));
  }
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--data", "ring8"}),
                    Catch::Contains("cannot train on --data ring8"));
  CHECK_THROWS_WITH(parse_train_options({"--dynamic"}),
                    Catch::Contains("--dynamic applies to --model mlp only"));
  CHECK_THROWS_WITH(parse_train_options({"--ema-decay", "1"}),
                    Catch::Contains("--ema-decay must be below 1"));
  CHECK(parse_train_options({"--ema-decay", "0"}).ema_decay == 0.0);
  CHECK_THROWS_WITH(parse_train_options({"--wrap", "none"}),
                    Catch::Contains("--wrap must be one of whole|separate, got 'none'"));
  CHECK_THROWS_AS(parse_train_options({"--wrap", "Whole"}), UsageError);
  CHECK_THROWS_WITH(parse_train_options({"--wrap", "separate", "--prepare"}),
                    Catch::Contains("--prepare goes with --wrap whole"));
}

TEST_CASE("the program exits with code 2 on a usage error and 0 on --help", "[options][program]") {
  std::string bin = std::string(TANDEM_TEST_BIN_DIR) + "/tandem-train";
  int rc = std::system((bin + " --bogus-flag 2>/dev/null").c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 2);
  rc = std::system((bin + " --help >/dev/null").c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 0);
}

TEST_CASE("the switch --resume-allow-fresh goes with --resume", "[options]") {
  CHECK(parse_train_options({"--resume", "--resume-allow-fresh"}).resume_allow_fresh);
  CHECK_FALSE(parse_train_options({"--resume"}).resume_allow_fresh);
  CHECK_THROWS_WITH(parse_train_options({"--resume-allow-fresh"}),
                    Catch::Contains("--resume-allow-fresh goes with --resume"));
}
