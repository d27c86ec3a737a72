// Shared-memory segment names and leftovers (runtime/dist/shared_segments.h), in a
// temporary folder standing in for /dev/shm: only segments of this pid namespace whose
// process is gone (or whose pid now belongs to a process started at another time) are stale.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/dist/shared_segments.h"
#include "tests/test_files.h"

using namespace tandem;

namespace {

// The pid of a process that has exited (and been reaped).
int dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  return static_cast<int>(child);
}

void plant(const testing::TempDir& dir, const std::string& name) {
  std::ofstream(dir.file(name)) << "segment";
}

}  // namespace

TEST_CASE("shared segments: only leftovers of processes that are gone are stale", "[shared]") {
  testing::TempDir dir("segments");
  const std::string own = dist::segment_name(7).substr(1);  // "tandem-<ns>-<pid>-<start>-7"
  unsigned long long ns_number = 0, start_number = 0;
  int pid = 0, n = 0;
  REQUIRE(std::sscanf(own.c_str(), "tandem-%llu-%d-%llu-%d", &ns_number, &pid, &start_number, &n) == 4);
  REQUIRE((pid == getpid() && n == 7 && ns_number > 0 && start_number > 0));
  const std::string ns = std::to_string(ns_number), start = std::to_string(start_number);
  const std::string gone = "tandem-" + ns + "-" + std::to_string(dead_pid()) + "-" + start + "-1";
  const std::string reused =
      "tandem-" + ns + "-" + std::to_string(getpid()) + "-1-3";              // this pid, another life
  const std::string legacy = "tandem-" + std::to_string(dead_pid()) + "-1";  // as tandem named them before
  const std::string kept[] = {own,
                              "tandem-1-" + std::to_string(dead_pid()) + "-5-1",  // another namespace
                              "tandem-" + std::to_string(getpid()) + "-2",        // before, and alive
                              "tandem-" + ns + "-x-1-1",
                              "tandem-" + ns + "-1-2-3-4-5",
                              "vader_segment.1"};
  for (const std::string& name : kept) plant(dir, name);
  std::vector<std::string> expected = {gone, reused, legacy};
  for (const std::string& name : expected) plant(dir, name);

  std::vector<std::string> stale = dist::stale_segments(dir.path.string());
  std::sort(stale.begin(), stale.end());
  std::sort(expected.begin(), expected.end());
  CHECK(stale == expected);

  const std::vector<std::string> removed = dist::remove_stale_segments(dir.path.string());
  REQUIRE(removed.size() == 3);
  for (const std::string& line : removed) CHECK_THAT(line, Catch::Contains("(7 bytes, process "));
  for (const std::string& name : expected) CHECK_FALSE(std::filesystem::exists(dir.file(name)));
  for (const std::string& name : kept) CHECK(std::filesystem::exists(dir.file(name)));
  CHECK(dist::remove_stale_segments(dir.path.string()).empty());
}
