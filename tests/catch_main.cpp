// The Catch2 main shared by every single-process test suite.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
