// The --out check: a missing directory is made, and a path that cannot hold the outputs
// gets the reason; the probe file never stays behind. The --out lock: one holder at a time,
// named to whoever is refused, gone with its holder. Stale temporaries: only tandem-train's.
// Links planted at the names a run writes: replaced or refused, never written through.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "models/data/png_writer.h"
#include "models/train/out_dir.h"
#include "models/train/out_lock.h"
#include "models/training/run_report.h"
#include "runtime/checkpoint.h"
#include "runtime/trace_json.h"
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

TEST_CASE("the --out lock is exclusive, names its holder, and ends with its holder", "[out_dir][lock]") {
  TempDir tmp("out_dir");
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof(host) - 1) == 0);
  const std::string holder = "in use by tandem-train on host " + std::string(host) + ", pid " +
                             std::to_string(getpid()) + " (started ";
  {
    OutDirLock first;
    REQUIRE(first.take(tmp.path.string()) == "");
    CHECK(first.held());
    CHECK_THAT(tandem::testing::read_bytes(tmp.file(".lock")),
               Catch::StartsWith(std::string(host) + " " + std::to_string(getpid()) + " "));
    // flock locks belong to an open of the file, not to the process: a second open here
    // conflicts as another process's would.
    OutDirLock second;
    const std::string refused = second.take(tmp.path.string());
    CHECK_THAT(refused, Catch::StartsWith(holder) && Catch::EndsWith(")"));
    CHECK_FALSE(second.held());
    OutDirLock moved = std::move(first);  // a moved lock is still held
    CHECK(moved.held());
    CHECK_FALSE(first.held());
    CHECK_THAT(second.take(tmp.path.string()), Catch::StartsWith(holder));
  }
  OutDirLock after;  // released with its holder
  CHECK(after.take(tmp.path.string()) == "");
}

TEST_CASE("a killed holder leaves no stale --out lock", "[out_dir][lock]") {
  TempDir tmp("out_dir");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    OutDirLock lock;
    const char verdict = lock.take(tmp.path.string()).empty() ? 'y' : 'n';
    [[maybe_unused]] ssize_t n = write(ready[1], &verdict, 1);
    pause();  // until killed
    _exit(0);
  }
  close(ready[1]);
  char verdict = 0;
  const ssize_t got = read(ready[0], &verdict, 1);
  close(ready[0]);
  OutDirLock lock;
  const std::string refused = lock.take(tmp.path.string());
  kill(child, SIGKILL);  // as a job is killed: no destructor runs
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(got == 1);
  REQUIRE(verdict == 'y');
  CHECK_THAT(refused, Catch::Contains(", pid " + std::to_string(child) + " (started "));
  CHECK(lock.take(tmp.path.string()) == "");
}

TEST_CASE("stale temporaries of atomic writes are removed, and nothing else", "[out_dir]") {
  TempDir tmp("out_dir");
  for (const char* name : {"ckpt-000010.safetensors.tmp", "samples-000010.png.tmp", "metrics.jsonl.tmp",
                           "report.html.tmp", "ckpt-000010.safetensors", "metrics.jsonl", "report.html",
                           "notes.tmp", "ckpt-000010.tmp", "my-metrics.jsonl.tmp"}) {
    std::ofstream(tmp.file(name)) << "bytes";
  }
  fs::create_directory(tmp.file("samples-000020.png.tmp"));  // not a file
  CHECK(remove_stale_tmp_files(tmp.path.string()) ==
        std::vector<std::string>{"ckpt-000010.safetensors.tmp", "metrics.jsonl.tmp", "report.html.tmp",
                                 "samples-000010.png.tmp"});
  CHECK(entries(tmp.path) == 7);
  for (const char* kept : {"ckpt-000010.safetensors", "metrics.jsonl", "report.html", "notes.tmp",
                           "ckpt-000010.tmp", "my-metrics.jsonl.tmp", "samples-000020.png.tmp"}) {
    CHECK(fs::exists(tmp.file(kept)));
  }
  CHECK(remove_stale_tmp_files(tmp.path.string()).empty());
}

TEST_CASE("links planted at the names written in --out never reach their target", "[out_dir][errors]") {
  TempDir tmp("out_links");
  const std::string out = tmp.file("out"), precious = tmp.file("precious");
  fs::create_directory(out);
  tandem::testing::write_bytes(precious, "precious\n");
  const auto plant = [&](const std::string& name) {
    fs::create_symlink(precious, out + "/" + name);
    return out + "/" + name;
  };
  const auto is_regular = [](const std::string& path) {
    return fs::is_regular_file(fs::symlink_status(path));
  };

  SECTION("the write probe: the link is removed, the directory found writable") {
    const std::string probe = plant(".write-test");
    CHECK(out_dir_problem(out).empty());
    CHECK_FALSE(fs::exists(fs::symlink_status(probe)));
  }
  SECTION("the lock: refused by name, dangling or not, nothing created") {
    plant(".lock");
    OutDirLock lock;
    CHECK(lock.take(out) == "cannot lock " + out + "/.lock (it is a symbolic link, not written through)");
    fs::remove(out + "/.lock");
    fs::create_symlink(tmp.file("absent"), out + "/.lock");
    CHECK_THAT(lock.take(out), Catch::Contains("symbolic link"));
    CHECK_FALSE(lock.held());
    CHECK_FALSE(fs::exists(tmp.file("absent")));
  }
  SECTION("the temporaries of atomic writes: replaced, then renamed into place") {
    tandem::training::RunReport report(out, "t", {}, 10);
    plant("report.html.tmp");
    CHECK(report.write(tandem::training::RunState::running).empty());
    CHECK(is_regular(out + "/report.html"));

    plant("samples-000010.png.tmp");
    tandem::data::write_png(out + "/samples-000010.png", 1, 1, 1, {7});
    CHECK(is_regular(out + "/samples-000010.png"));

    plant("ckpt-000010.safetensors.tmp");
    tandem::save_safetensors(out + "/ckpt-000010.safetensors", {{"x", tandem::Tensor::zeros({2})}});
    CHECK(is_regular(out + "/ckpt-000010.safetensors"));

    plant("trace.json.tmp");
    tandem::trace::write_trace_file(out + "/trace.json", {});
    CHECK(is_regular(out + "/trace.json"));
    for (const char* name :
         {"report.html.tmp", "samples-000010.png.tmp", "ckpt-000010.safetensors.tmp", "trace.json.tmp"})
      CHECK_FALSE(fs::exists(fs::symlink_status(out + "/" + name)));
  }
  SECTION("the final names of atomic writes: the link is replaced by the file") {
    tandem::training::RunReport report(out, "t", {}, 10);
    const std::string path = plant("report.html");
    CHECK(report.write(tandem::training::RunState::running).empty());
    CHECK(is_regular(path));
  }
  CHECK(tandem::testing::read_bytes(precious) == "precious\n");
}
