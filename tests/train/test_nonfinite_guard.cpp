// --max-nonfinite-steps' counting, against sequences written out by hand: each observation
// is {part, non-finite events so far, optimizer steps attempted so far}.
#include <catch2/catch.hpp>
#include <sstream>

#include "models/train/nonfinite_guard.h"

using tandem::models::NonFiniteGuard;

TEST_CASE("NonFiniteGuard stops after the limit in a row, warns once per run, and a finite step resets it",
          "[train][nonfinite]") {
  std::ostringstream warn;
  NonFiniteGuard guard(3, "skip", &warn);
  guard.observe(1, {{"generator", 0, 1}, {"discriminator", 0, 1}});
  CHECK(guard.in_a_row() == 0);
  guard.observe(2, {{"generator", 0, 2}, {"discriminator", 1, 2}});
  guard.observe(3, {{"generator", 1, 3}, {"discriminator", 2, 3}});
  CHECK(guard.in_a_row() == 2);
  CHECK(
      warn.str() ==
      "warning: non-finite averaged gradients at iteration 2 (discriminator): --on-nonfinite skip skips the "
      "step; the run stops after 3 such optimizer steps of a part in a row (--max-nonfinite-steps)\n");
  guard.observe(4, {{"generator", 1, 4}, {"discriminator", 2, 4}});  // both finite: the counts start again
  CHECK(guard.in_a_row() == 0);
  guard.observe(5, {{"generator", 2, 5}, {"discriminator", 2, 5}});
  guard.observe(6, {{"generator", 3, 6}, {"discriminator", 3, 6}});
  CHECK(warn.str().find("at iteration 5 (generator)") !=
        std::string::npos);  // a second run, a second warning
  CHECK_THROWS_WITH(guard.observe(7, {{"generator", 4, 7}, {"discriminator", 4, 7}}),
                    Catch::Contains("in 3 optimizer steps in a row (iterations 5-7, steps per part: "
                                    "generator 3, discriminator 2) with --on-nonfinite skip"));
}

TEST_CASE("NonFiniteGuard counts steps, not iterations: accumulation and n_critic leave the count as it is",
          "[train][nonfinite]") {
  SECTION("--accumulate 3: a part steps every third iteration") {
    NonFiniteGuard guard(2, "skip", nullptr);
    guard.observe(1, {{"discriminator", 0, 0}});
    guard.observe(2, {{"discriminator", 0, 0}});
    guard.observe(3, {{"discriminator", 1, 1}});  // the step: skipped
    guard.observe(4, {{"discriminator", 1, 1}});  // accumulating: says nothing
    guard.observe(5, {{"discriminator", 1, 1}});
    CHECK(guard.in_a_row() == 1);
    CHECK_THROWS_WITH(guard.observe(6, {{"discriminator", 2, 2}}),
                      Catch::Contains("in 2 optimizer steps in a row (iterations 3-6"));
  }
  SECTION("--n-critic 2: the generator alone non-finite, stepping every second iteration") {
    NonFiniteGuard guard(3, "scrub", nullptr);
    int64_t g_bad = 0, g_steps = 0;
    for (int64_t it = 1; it <= 4; ++it) {
      if (it % 2 == 0) ++g_bad, ++g_steps;
      guard.observe(it, {{"generator", g_bad, g_steps}, {"discriminator", 0, it}});  // D finite every step
    }
    CHECK(guard.in_a_row() == 2);
    guard.observe(5, {{"generator", g_bad, g_steps}, {"discriminator", 0, 5}});
    CHECK(guard.in_a_row() == 2);
    CHECK_THROWS_WITH(guard.observe(6, {{"generator", g_bad + 1, g_steps + 1}, {"discriminator", 0, 6}}),
                      Catch::Contains("(iterations 2-6, steps per part: generator 3)"));
  }
  SECTION("a finite step of the part resets only that part") {
    NonFiniteGuard guard(3, "skip", nullptr);
    guard.observe(1, {{"generator", 1, 1}, {"discriminator", 1, 1}});
    guard.observe(2, {{"generator", 2, 2}, {"discriminator", 1, 2}});
    CHECK(guard.in_a_row() == 2);
    guard.observe(3, {{"generator", 2, 3}, {"discriminator", 1, 3}});
    CHECK(guard.in_a_row() == 0);
  }
}

TEST_CASE("NonFiniteGuard with limit 0 warns and never stops", "[train][nonfinite]") {
  std::ostringstream warn;
  NonFiniteGuard guard(0, "scrub", &warn);
  for (int64_t i = 1; i <= 1000; ++i) guard.observe(i, {{"generator", i, i}});
  CHECK(guard.in_a_row() == 1000);
  CHECK(warn.str().find("--on-nonfinite scrub scrubs them; the run stops after none") != std::string::npos);
}
