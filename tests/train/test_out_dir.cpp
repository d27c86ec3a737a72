// The --out check: a missing directory is made, and a path that cannot hold the outputs
// gets the reason; the probe file never stays behind.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "models/train/out_dir.h"
#include "tests/test_files.h"

using namespace tandem::models;
namespace fs = std::filesystem;
using tandem::testing::TempDir;

namespace {

size_t entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("a missing --out is created with its parents, and only it", "[out_dir]") {
  TempDir tmp("out_dir");
  const fs::path out = tmp.path / "a" / "b" / "run";
  CHECK(out_dir_problem(out.string()) == "");
  CHECK(fs::is_directory(out));
  CHECK(entries(out) == 0);  // the write probe is gone
}

TEST_CASE("an existing --out keeps its files", "[out_dir]") {
  TempDir tmp("out_dir");
  std::ofstream(tmp.file("metrics.jsonl")) << "{}\n";
  CHECK(out_dir_problem(tmp.path.string()) == "");
  CHECK(entries(tmp.path) == 1);
  CHECK(tandem::testing::read_bytes(tmp.file("metrics.jsonl")) == "{}\n");
}

TEST_CASE("an --out under a regular file names the reason", "[out_dir][errors]") {
  TempDir tmp("out_dir");
  std::ofstream(tmp.file("regular-file")) << "not a directory";
  CHECK(out_dir_problem(tmp.file("regular-file") + "/run") ==
        "cannot create the directory (Not a directory)");
  CHECK_THAT(out_dir_problem(tmp.file("regular-file")), Catch::StartsWith("cannot create the directory ("));
}

TEST_CASE("an --out without write permission is not writable", "[out_dir][errors]") {
  if (geteuid() == 0) {
    WARN("running as root, which writes through any permission: the check cannot fail here");
    return;
  }
  TempDir tmp("out_dir");
  fs::permissions(tmp.path, fs::perms::owner_read | fs::perms::owner_exec);
  CHECK(out_dir_problem(tmp.path.string()) == "directory is not writable");
  fs::permissions(tmp.path, fs::perms::owner_all);
}
