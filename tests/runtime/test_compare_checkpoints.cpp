// tandem-compare-checkpoints (runtime/tools/compare_checkpoints_main.cpp) run as a user runs
// it, on checkpoints written here: its bounds element by element and in norm, --atol's
// floor for values that are zero up to rounding, and its exit codes.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::string write_checkpoint(const TempDir& dir, const std::string& name, const std::vector<double>& weight,
                             const std::vector<double>& momentum) {
  const std::string path = dir.file(name);
  std::map<std::string, Tensor> tensors;
  tensors["model.weight"] = Tensor::from_values({static_cast<int64_t>(weight.size())}, weight, DType::f64);
  tensors["opt.momentum"] =
      Tensor::from_values({static_cast<int64_t>(momentum.size())}, momentum, DType::f64);
  save_safetensors(path, tensors, {});
  return path;
}

// The tool's exit status on `args`; its output goes to `log`.
int run(const std::string& args, const std::string& log) {
  const std::string command =
      TANDEM_TEST_BIN_DIR "/tandem-compare-checkpoints " + args + " > " + log + " 2>&1";
  const int rc = std::system(command.c_str());
  REQUIRE(WIFEXITED(rc));
  return WEXITSTATUS(rc);
}

}  // namespace

TEST_CASE("tandem-compare-checkpoints: relative bounds, an absolute floor, and its exit codes",
          "[runtime][tools]") {
  TempDir tmp("compare_checkpoints");
  const std::string log = tmp.file("log");
  // b's weight differs by 2e-7 relative; its momentum near zero differs by its own size
  // (a gradient that is zero up to rounding), 1e-9 apart in absolute terms.
  const std::string a = write_checkpoint(tmp, "a.safetensors", {1.0, -2.0, 0.5}, {1e-9, 0.25});
  const std::string b = write_checkpoint(tmp, "b.safetensors", {1.0 + 2e-7, -2.0, 0.5}, {2e-9, 0.25});
  const std::string both = a + " " + b;

  CHECK(run(a + " " + a, log) == 0);
  CHECK(read_bytes(log).find("bitwise equal") != std::string::npos);
  CHECK(run(both + " --rtol 1e-6", log) == 0);  // the parameters (prefix "model.")
  CHECK(read_bytes(log).find("not bitwise equal") != std::string::npos);
  CHECK(run(both + " --rtol 1e-7", log) == 1);
  CHECK(read_bytes(log).find("BEYOND") != std::string::npos);

  // The momentum: 100% apart relative to itself, 4e-9 of the tensor's largest magnitude.
  CHECK(run(both + " --prefix opt. --rtol 1e-5", log) == 1);
  CHECK(read_bytes(log).find("opt.momentum[0]") != std::string::npos);
  CHECK(run(both + " --prefix opt. --rtol 1e-5 --atol 1e-8", log) == 0);
  CHECK(run(both + " --prefix opt. --rtol 1e-5 --atol 1e-10", log) == 1);
  CHECK(run(both + " --prefix opt. --rtol 1e-8 --per-tensor", log) == 0);
  CHECK(run(both + " --prefix opt. --rtol 1e-9 --per-tensor", log) == 1);
  // In norm: ||a - b|| = 1e-9 against ||a|| = 0.25.
  CHECK(run(both + " --prefix opt. --norm --rtol 1e-8", log) == 0);
  CHECK(run(both + " --prefix opt. --norm --rtol 1e-9", log) == 1);

  // Usage errors and unreadable files: 2, named.
  CHECK(run(both + " --atol -1", log) == 2);
  CHECK(read_bytes(log).find("--atol '-1' is not a non-negative number") != std::string::npos);
  CHECK(run(a + " " + tmp.file("missing.safetensors"), log) == 2);
  CHECK(read_bytes(log).find("missing.safetensors") != std::string::npos);
  CHECK(run(a, log) == 2);
  CHECK(read_bytes(log).find("usage: tandem-compare-checkpoints") != std::string::npos);
  // Names that differ: 1, each named.
  const std::string other = write_checkpoint(tmp, "c.safetensors", {1.0, -2.0}, {1e-9, 0.25});
  CHECK(run(a + " " + other, log) == 1);
  CHECK(read_bytes(log).find("model.weight is float64[3]") != std::string::npos);
}
