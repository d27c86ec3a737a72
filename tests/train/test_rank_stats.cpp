// The resident size against the kernel's own figure in /proc/self/status, and against
// memory the test touches and hands back. (gather_rank_stats is collective: the 2-rank
// suite tests it.)
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "models/train/rank_stats.h"

using namespace tandem::models;

namespace {

// VmRSS from /proc/self/status, in kB of 1024 bytes, as MB of 10^6 bytes.
double status_rss_mb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024.0 / 1e6;
  }
  return -1.0;
}

}  // namespace

TEST_CASE("the resident size is the current one, in MB", "[rank_stats]") {
  REQUIRE(status_rss_mb() > 0);
  const double base = resident_mb();
  CHECK(base == Approx(status_rss_mb()).margin(2.0));

  constexpr size_t kBytes = 64 << 20;  // above glibc's largest mmap threshold: returned on free
  auto block = std::make_unique<char[]>(kBytes);
  std::memset(block.get(), 1, kBytes);  // touched pages become resident
  const double grown = resident_mb();
  CHECK(grown - base == Approx(kBytes / 1e6).margin(3.0));
  CHECK(grown == Approx(status_rss_mb()).margin(2.0));
  block.reset();
  CHECK(resident_mb() == Approx(base).margin(3.0));  // current, not the peak
}
