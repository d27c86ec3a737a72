// The resident size against the kernel's own figure in /proc/self/status, and against
// pages the test maps, touches and unmaps. (gather_rank_stats is collective: the 2-rank
// suite tests it.)
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
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

  // Pages straight from the kernel (no allocator or sanitizer keeps them after munmap).
  constexpr size_t kBytes = 64 << 20;
  void* block = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(block != MAP_FAILED);
  std::memset(block, 1, kBytes);  // touched pages become resident
  // At least the block: under AddressSanitizer its shadow (an eighth of it) becomes resident
  // too, and may stay after the munmap, on some kernels.
  const double grown = resident_mb();
  CHECK(grown - base >= kBytes / 1e6 - 3.0);
  CHECK(grown == Approx(status_rss_mb()).margin(2.0));
  munmap(block, kBytes);
  const double after = resident_mb();
  CHECK(grown - after >= kBytes / 1e6 - 3.0);  // current, not the peak: the block's pages left
  CHECK(after == Approx(status_rss_mb()).margin(2.0));
}
