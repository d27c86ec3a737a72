// Numeric environment settings are read strictly: the whole text, finite, in range.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "runtime/env_number.h"

using namespace tandem;

namespace {
constexpr const char* kName = "TANDEM_TEST_ENV_NUMBER";
}  // namespace

TEST_CASE("env_number: unset is nullopt, a number in range is read, anything else is named", "[env]") {
  unsetenv(kName);
  CHECK_FALSE(env_number(kName, 0, 10, "things").has_value());
  setenv(kName, "", 1);
  CHECK_FALSE(env_number(kName, 0, 10, "things").has_value());
  setenv(kName, "2.5", 1);
  CHECK(env_number(kName, 0, 10, "things") == 2.5);
  setenv(kName, "10", 1);
  CHECK(env_number(kName, 0, 10, "things") == 10.0);
  for (const char* bad : {"abc", "3x", "-1", "11", "inf", "-inf", "nan", "1e400", " "}) {
    INFO(bad);
    setenv(kName, bad, 1);
    CHECK_THROWS_WITH(
        env_number(kName, 0, 10, "things"),
        Catch::Contains(std::string(kName) + "='" + bad + "' must be a number of things from 0 to 10"));
  }
  unsetenv(kName);
}
