// The compiler keeps what the code says: patterns a compiler of CI's kind was seen to get
// wrong under tandem's flags (CMakeLists.txt says which flag keeps them right).
#include <catch2/catch.hpp>
#include <cstdlib>
#include <vector>

namespace {

// A call the compiler cannot see through, between building a value and reading it back.
void* (*volatile g_opaque_malloc)(size_t) = std::malloc;

}  // namespace

TEST_CASE("a braced std::vector<double> of repeated values reads back as written", "[toolchain]") {
  // GCC 12.2 with AVX-512 and SLP vectorisation stored {1, 1, 0, 0} as four ones.
  std::vector<double> ones_then_zeros = {1, 1, 0, 0};
  void* p = g_opaque_malloc(32);
  CHECK(ones_then_zeros == std::vector<double>{1.0, 1.0, 0.0, 0.0});
  CHECK(ones_then_zeros[2] == 0.0);
  CHECK(ones_then_zeros[3] == 0.0);
  std::free(p);
}
