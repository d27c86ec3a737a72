// --max-nonfinite-steps' counting, against sequences written out by hand.
#include <catch2/catch.hpp>
#include <sstream>

#include "models/train/nonfinite_guard.h"

using tandem::models::NonFiniteGuard;

TEST_CASE("NonFiniteGuard stops after the limit in a row, warns once per run, and a finite step resets it",
          "[train][nonfinite]") {
  std::ostringstream warn;
  NonFiniteGuard guard(3, "skip", &warn);
  guard.observe(1, {{"generator", 0}, {"discriminator", 0}});
  CHECK(guard.in_a_row() == 0);
  guard.observe(2, {{"generator", 0}, {"discriminator", 1}});
  guard.observe(3, {{"generator", 1}, {"discriminator", 2}});
  CHECK(guard.in_a_row() == 2);
  CHECK(
      warn.str() ==
      "warning: non-finite averaged gradients at iteration 2 (discriminator): --on-nonfinite skip skips the "
      "step; the run stops after 3 such iterations in a row (--max-nonfinite-steps)\n");
  guard.observe(4, {{"generator", 1}, {"discriminator", 2}});  // finite: the count starts again
  CHECK(guard.in_a_row() == 0);
  guard.observe(5, {{"generator", 2}, {"discriminator", 2}});
  guard.observe(6, {{"generator", 3}, {"discriminator", 2}});
  CHECK(warn.str().find("at iteration 5 (generator)") !=
        std::string::npos);  // a second run, a second warning
  CHECK_THROWS_WITH(guard.observe(7, {{"generator", 3}, {"discriminator", 3}}),
                    Catch::Contains("in 3 iterations in a row (iterations 5-7, parts: "
                                    "generator, discriminator) with --on-nonfinite skip"));
}

TEST_CASE("NonFiniteGuard with limit 0 warns and never stops", "[train][nonfinite]") {
  std::ostringstream warn;
  NonFiniteGuard guard(0, "scrub", &warn);
  for (int64_t i = 1; i <= 1000; ++i) guard.observe(i, {{"generator", i}});
  CHECK(guard.in_a_row() == 1000);
  CHECK(warn.str().find("--on-nonfinite scrub scrubs them; the run stops after none") != std::string::npos);
}
