#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "runtime/command_line.h"
#include "runtime/error.h"

using namespace tandem;

namespace {

enum class Colour { red, green, blue };

// One field of every kind, at its default.
struct Options {
  int64_t count = 20;
  int small = 3;
  double factor = 2.5;
  std::string json;
  std::string backend = "mpi";
  Colour colour = Colour::green;
  bool raw = false;
  int64_t bytes = int64_t{4} << 10;
  std::vector<std::string> modes = {"whole", "separate"};
  std::vector<int64_t> ranks = {1, 2};
  std::vector<double> caps = {1, 25.5};
  std::vector<int64_t> sizes = {int64_t{1} << 20, int64_t{256} << 20};
  std::vector<std::string> names = {"a"};
};

CommandLine table(Options& o) {
  CommandLine cl("demo", "Demonstrates every kind of flag.");
  cl.add("--count", &o.count, "timed iterations", 1);
  cl.add("--small", &o.small, "an int from 0 to 9", 0, 9);
  cl.add("--factor", &o.factor, "a positive real below 10", 0, 10);
  cl.add("--json", &o.json, "write JSON here", "FILE");
  cl.add_choice("--backend", &o.backend, {"mpi", "nccl"}, "collective backend");
  cl.add_choice("--colour", &o.colour,
                {{"red", Colour::red}, {"green", Colour::green}, {"blue", Colour::blue}}, "an enum");
  cl.add_flag("--raw", &o.raw, "a switch");
  cl.add_bytes("--bytes", &o.bytes, "one size");
  cl.add_list("--modes", &o.modes, "modes to run", {"single", "whole", "separate"});
  cl.add_list("--ranks", &o.ranks, "rank counts", 1, 64);
  cl.add_list("--caps", &o.caps, "bucket caps in MB", 0);
  cl.add_bytes_list("--sizes", &o.sizes, "message sizes");
  cl.add_list("--names", &o.names, "any names");
  return cl;
}

// Parses `args` against a fresh table; returns what try_parse returned.
bool parse(Options& o, const std::vector<std::string>& args) { return table(o).try_parse(args); }

}  // namespace

TEST_CASE("command line: every kind of value reads into its field", "[command_line]") {
  Options o;
  CHECK(parse(o, {"--count", "7",        "--small=9",      "--factor", "0.125",
                  "--json",  "out.json", "--backend=nccl", "--colour", "blue",
                  "--raw",   "--bytes",  "1.5M",           "--modes",  "single,,whole",
                  "--ranks", "2,4,8",    "--caps=0.5,100", "--sizes",  "4K,64k,1G,4096",
                  "--names", "x,y"}));
  CHECK(o.count == 7);
  CHECK(o.small == 9);
  CHECK(o.factor == 0.125);
  CHECK(o.json == "out.json");
  CHECK(o.backend == "nccl");
  CHECK(o.colour == Colour::blue);
  CHECK(o.raw);
  CHECK(o.bytes == 1572864);
  CHECK(o.modes == std::vector<std::string>{"single", "whole"});
  CHECK(o.ranks == std::vector<int64_t>{2, 4, 8});
  CHECK(o.caps == std::vector<double>{0.5, 100});
  CHECK(o.sizes == std::vector<int64_t>{4096, 65536, int64_t{1} << 30, 4096});
  CHECK(o.names == std::vector<std::string>{"x", "y"});
}

TEST_CASE("command line: unset flags keep their defaults and a repeated flag replaces", "[command_line]") {
  Options o;
  CHECK(parse(o, {}));
  CHECK(o.count == 20);
  CHECK(o.colour == Colour::green);
  CHECK_FALSE(o.raw);
  CHECK(o.modes == std::vector<std::string>{"whole", "separate"});
  CHECK(parse(o, {"--count", "5", "--count", "6", "--modes", "single", "--modes", "whole,single"}));
  CHECK(o.count == 6);
  CHECK(o.modes == std::vector<std::string>{"whole", "single"});
  SECTION("a value that looks like a flag goes after =") {
    CHECK(parse(o, {"--json=--count", "--small", "-0"}));
    CHECK(o.json == "--count");
    CHECK(o.small == 0);
  }
}

TEST_CASE("command line: --help lists every flag with its value and default", "[command_line]") {
  Options o;
  CommandLine cl = table(o);
  CHECK_FALSE(cl.try_parse({"--count", "3", "--help", "--no-such-flag"}));
  CHECK_FALSE(cl.try_parse({"-h"}));
  const std::string usage = cl.usage();
  INFO(usage);
  CHECK_THAT(usage, Catch::StartsWith("usage: demo [flags]\n\nDemonstrates every kind of flag.\n"));
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"--count N", "timed iterations (default: 20)"},
      {"--small N", "(default: 3)"},
      {"--factor X", "(default: 2.5)"},
      {"--json FILE", "write JSON here\n"},
      {"--backend mpi|nccl", "(default: mpi)"},
      {"--colour red|green|blue", "(default: green)"},
      {"--raw", "a switch\n"},
      {"--bytes BYTES", "(default: 4K)"},
      {"--modes single|whole|separate,...", "(default: whole,separate)"},
      {"--ranks N,...", "(default: 1,2)"},
      {"--caps X,...", "(default: 1,25.5)"},
      {"--sizes BYTES,...", "(default: 1M,256M)"},
      {"--names TEXT,...", "(default: a)"},
      {"--help", "this text"},
  };
  for (const auto& [flag, help] : rows) {
    INFO(flag);
    const size_t at = usage.find("\n  " + flag);
    REQUIRE(at != std::string::npos);
    CHECK((usage[at + 3 + flag.size()] == ' ' || usage[at + 3 + flag.size()] == '\n'));
    // The help and the default follow the flag, on its line or the next.
    CHECK(usage.find(help, at) < usage.find("\n  --", at + flag.size()));
  }
  CHECK_THAT(usage, Catch::Contains("BYTES: a byte count with an optional K, M or G suffix"));
}

TEST_CASE("command line: a usage error names the flag and the bad value", "[command_line][errors]") {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--itres", "5"}, "unknown flag '--itres'"},
      {{"-x"}, "unknown flag '-x'"},
      {{"5"}, "unexpected argument '5'"},
      {{"--count"}, "--count needs a value (N)"},
      {{"--json", "--raw"}, "--json needs a value (FILE), got flag --raw"},
      {{"--raw=yes"}, "--raw takes no value, got 'yes'"},
      {{"--count", "ten"}, "--count needs an integer, got 'ten'"},
      {{"--count", "5x"}, "--count needs an integer, got '5x'"},
      {{"--count="}, "--count needs an integer, got ''"},
      {{"--count", "0"}, "--count must be at least 1, got 0"},
      {{"--count", "99999999999999999999"},
       "--count must be at most 9223372036854775807, got 99999999999999999999"},
      {{"--small", "10"}, "--small must be at most 9, got 10"},
      {{"--small", "-1"}, "--small must be at least 0, got -1"},
      {{"--factor", "fast"}, "--factor needs a finite number, got 'fast'"},
      {{"--factor", "nan"}, "--factor needs a finite number, got 'nan'"},
      {{"--factor", "0"}, "--factor must be above 0, got 0"},
      {{"--factor", "10"}, "--factor must be below 10, got 10"},
      {{"--backend", "gloo"}, "--backend must be one of mpi|nccl, got 'gloo'"},
      {{"--colour", "Red"}, "--colour must be one of red|green|blue, got 'Red'"},
      {{"--bytes", "4X"}, "--bytes needs a byte count such as 4096, 64K, 256M or 1G, got '4X'"},
      {{"--bytes", "0"}, "--bytes must be at least 1, got 0"},
      {{"--bytes", "0.1K"}, "--bytes must be a whole number of bytes, got 0.1K"},
      {{"--bytes", "9000000000G"}, "--bytes is too large, got 9000000000G"},
      {{"--modes", "whole,single,prepare"}, "--modes must be one of single|whole|separate, got 'prepare'"},
      {{"--modes", ","}, "--modes needs at least one value, got ','"},
      {{"--ranks", "2,x"}, "--ranks needs an integer, got 'x'"},
      {{"--ranks", "2,128"}, "--ranks must be at most 64, got 128"},
      {{"--caps", "1,-5"}, "--caps must be above 0, got -5"},
      {{"--sizes", "1M,1Q"}, "--sizes needs a byte count such as 4096, 64K, 256M or 1G, got '1Q'"},
  };
  for (const auto& [args, message] : cases) {
    Options o;
    INFO("args: " << args.front() << (args.size() > 1 ? " " + args[1] : ""));
    CHECK_THROWS_AS(parse(o, args), UsageError);
    CHECK_THROWS_WITH(parse(o, args), message);
  }
}

TEST_CASE("command line: a badly declared flag is a programming error", "[command_line][errors]") {
  Options o;
  CommandLine cl = table(o);
  int64_t other = 0;
  CHECK_THROWS_AS(cl.add("--count", &other, "again"), Error);
  CHECK_THROWS_WITH(cl.add("--count", &other, "again"), Catch::Contains("demo: --count is added twice"));
  CHECK_THROWS_WITH(cl.add("--help", &other, "mine"), Catch::Contains("demo: --help is built in"));
  CHECK_THROWS_WITH(cl.add("-n", &other, "short"), Catch::Contains("a flag is --name, not '-n'"));
  CHECK_THROWS_WITH(cl.add("--n=1", &other, "odd"), Catch::Contains("not '--n=1'"));
  std::string choice;
  CHECK_THROWS_WITH(cl.add_choice("--none", &choice, {}, "empty"), Catch::Contains("--none has no choices"));
}

TEST_CASE("command line: sections, described defaults, wrapped help and the Markdown page",
          "[command_line]") {
  int64_t count = 20, width = 0;
  bool raw = false;
  CommandLine cl("demo", "Demonstrates sections.");
  cl.add("--count", &count, "timed iterations", 1);
  cl.group("Output");
  cl.add("--width", &width, std::string(30, 'w') + " " + std::string(30, 'x') + " " + std::string(30, 'y'),
         1);
  cl.describe_default("--width", "64; wide 128");
  cl.add_flag("--raw", &raw, "a | switch");
  const std::string usage = cl.usage();
  INFO(usage);
  // A flag added before the first group has no heading; the rest sit under theirs, --help last.
  CHECK_THAT(usage,
             Catch::Contains("Demonstrates sections.\n\n  --count N  timed iterations (default: 20)\n\n"
                             "Output:\n  --width N"));
  CHECK_THAT(usage, Catch::EndsWith("  --raw      a | switch\n  --help     this text\n"));
  // Help wraps under its column at 100 characters; a default is never split.
  CHECK_THAT(usage, Catch::Contains(std::string(30, 'x') + "\n             " + std::string(30, 'y') +
                                    " (default: 64; wide 128)\n"));
  CHECK_THROWS_WITH(cl.describe_default("--none", "x"), Catch::Contains("demo: --none is not a flag"));

  const std::string page = cl.markdown();
  INFO(page);
  CHECK_THAT(page, Catch::StartsWith("# demo\n\n```\nusage: demo [flags]\n```\n\nDemonstrates sections.\n\n"
                                     "| Flag | Default | Meaning |\n|---|---|---|\n"
                                     "| `--count N` | `20` | timed iterations |\n\n## Output\n\n"));
  CHECK_THAT(page, Catch::Contains("| `--width N` | `64; wide 128` | www"));
  CHECK_THAT(page, Catch::Contains("| `--raw` |  | a \\| switch |\n\n`--help` prints this as text.\n"));
}

TEST_CASE("command line: given() tells a flag set on the command line from its default", "[command_line]") {
  Options o;
  CommandLine cl = table(o);
  REQUIRE(cl.try_parse({"--count", "20", "--raw"}));
  CHECK(cl.given("--count"));  // even at its default's value
  CHECK(cl.given("--raw"));
  CHECK_FALSE(cl.given("--small"));
  REQUIRE(cl.try_parse({"--small=4"}));  // each parse starts afresh
  CHECK_FALSE(cl.given("--count"));
  CHECK(cl.given("--small"));
}

TEST_CASE("command line: positive reals, reals where 0 is off, and unsigned integers", "[command_line]") {
  double rate = 0.5, clip = 0, decay = 0.9;
  uint64_t seed = 3;
  CommandLine cl("demo", "");
  cl.add_positive("--rate", &rate, "a positive real");
  cl.add_off_or_positive("--clip", &clip, "0: off");
  cl.add_off_or_positive("--decay", &decay, "0: off, else below 1", 1.0);
  cl.add("--seed", &seed, "unsigned");
  REQUIRE(cl.try_parse({"--rate", "2e-4", "--clip", "0", "--decay=0.25", "--seed", "9223372036854775807"}));
  CHECK(rate == 2e-4);
  CHECK(clip == 0.0);
  CHECK(decay == 0.25);
  CHECK(seed == uint64_t{9223372036854775807});
  REQUIRE(cl.try_parse({"--clip", "1.5", "--decay", "0"}));
  CHECK(clip == 1.5);
  CHECK(decay == 0.0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--rate", "0"}, "--rate must be a positive finite number, got 0"},
      {{"--rate", "-1"}, "--rate must be a positive finite number, got -1"},
      {{"--rate", "inf"}, "--rate must be a positive finite number, got inf"},
      {{"--rate", "fast"}, "--rate needs a number, got 'fast'"},
      {{"--clip", "-1"}, "--clip must be a finite number >= 0 (0: off), got -1"},
      {{"--clip", "nan"}, "--clip must be a finite number >= 0 (0: off), got nan"},
      {{"--clip", "ten"}, "--clip needs a number, got 'ten'"},
      {{"--decay", "1"}, "--decay must be below 1, got 1"},
      {{"--seed", "-1"}, "--seed must be at least 0, got -1"},
  };
  for (const auto& [args, message] : cases) {
    INFO(args[0] << " " << args[1]);
    CHECK_THROWS_WITH(cl.try_parse(args), message);
  }
}
