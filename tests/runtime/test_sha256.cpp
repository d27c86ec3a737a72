// SHA-256 against FIPS 180-4's examples (and the long-message vector of its test suite),
// fed whole and in pieces that straddle the 64-byte blocks and the padding's boundary.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/sha256.h"

using namespace tandem;

TEST_CASE("sha256_hex gives the standard's digests", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("Sha256 fed in pieces equals one piece, at every split of 0 to 130 bytes", "[sha256]") {
  std::string message;
  for (int i = 0; i < 130; ++i) message += static_cast<char>((i * 37 + 11) & 0xff);
  for (size_t length : {55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 130u}) {
    const std::string whole = sha256_hex(std::string_view(message).substr(0, length));
    for (size_t split = 0; split <= length; ++split) {
      Sha256 hash;
      hash.update(std::string_view(message).substr(0, split));
      hash.update(std::string_view(message).substr(split, length - split));
      INFO("length " << length << ", split at " << split);
      CHECK(hash.hex() == whole);
    }
  }
  Sha256 used;
  used.hex();
  CHECK_THROWS_WITH(used.update("x"), Catch::Contains("after hex()"));
}
