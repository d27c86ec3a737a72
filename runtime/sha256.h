// SHA-256 (FIPS 180-4), for content that must be named the same on every machine and
// release: the FID feature network tandem ships is checked by the SHA-256 of its weights.
//
// Contract:
// - Sha256: update(bytes) any number of times, then hex() once: 64 lowercase hex digits of
//   the digest of every byte given, in order (update after hex() is an Error).
// - sha256_hex(bytes) is Sha256 over one piece.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem {

class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  std::string hex();

 private:
  void compress(const unsigned char* block);

  std::array<uint32_t, 8> state_;
  std::array<unsigned char, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes given
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);

}  // namespace tandem
