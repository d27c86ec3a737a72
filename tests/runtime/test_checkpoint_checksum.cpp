// The checkpoint checksum: a changed byte anywhere in a file tandem wrote is refused by
// name, and files without a checksum (other writers, older checkpoints) still load.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <string>

#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/rng.h"
#include "tests/test_files.h"
using namespace tandem;
namespace fs = std::filesystem;
using tandem::testing::read_bytes;
using tandem::testing::TempDir;
using tandem::testing::write_bytes;

namespace {

std::map<std::string, Tensor> small_tensors() {
  Generator gen(11);
  Tensor w = Tensor::empty({2, 3});
  fill_normal(w, 0.0, 1.0, gen);
  Tensor m = Tensor::empty({3}, DType::f64);
  fill_normal(m, 0.0, 1.0, gen);
  return {{"model.w", w}, {"optim.m", m}, {"step", Tensor::full({1}, 7.0, DType::i64)}};
}

const std::map<std::string, std::string> kMeta = {{"iteration", "20"}, {"model", "mlp"}};

uint64_t header_end(const std::string& path) { return read_safetensors_header(path).data_offset; }

// Byte offset of the first occurrence of `needle` in the file's bytes.
size_t find_in(const std::string& bytes, const std::string& needle) {
  size_t at = bytes.find(needle);
  REQUIRE(at != std::string::npos);
  return at;
}

// Removes `"tandem.crc32":"xxxxxxxx",` from the header (same length, spaces after the JSON),
// as a writer that records no checksum would have left the file.
std::string without_checksum(std::string bytes) {
  const std::string key = "\"tandem.crc32\":\"";
  size_t at = find_in(bytes, key);
  size_t end = at + key.size() + 9;  // 8 hex digits and the closing quote
  if (bytes[end] == ',') {
    ++end;
  } else if (bytes[at - 1] == ',') {
    --at;
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | static_cast<unsigned char>(bytes[i]);
  std::string header = bytes.substr(8, header_bytes);
  header.erase(at - 8, end - at);
  header.append(end - at, ' ');
  return bytes.substr(0, 8) + header + bytes.substr(8 + header_bytes);
}

}  // namespace

TEST_CASE("checkpoint checksum: every single-bit flip is refused or changes nothing",
          "[checkpoint][checksum]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000020.safetensors");
  save_safetensors(path, small_tensors(), kMeta);
  const std::string good = read_bytes(path);
  const SafetensorsFile reference = load_safetensors(path);
  const std::string flipped_path = dir.file("flipped.safetensors");
  // The one place a flip goes unnoticed: the checksum's key name. The file then reads as one
  // without a checksum, under another metadata key, and nothing else in it has changed.
  const size_t key_begin = find_in(good, "\"tandem.crc32\"") + 1;
  const size_t key_end = key_begin + std::strlen("tandem.crc32");

  int refused = 0, renamed_key = 0;
  for (size_t byte = 0; byte < good.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bytes = good;
      bytes[byte] = static_cast<char>(bytes[byte] ^ (1 << bit));
      write_bytes(flipped_path, bytes);
      INFO("byte " << byte << " bit " << bit << " (data begins at " << header_end(path) << ")");
      try {
        SafetensorsFile loaded = load_safetensors(flipped_path);
        CHECK((byte >= key_begin && byte < key_end));
        std::map<std::string, std::string> expected = reference.metadata;
        expected[bytes.substr(key_begin, key_end - key_begin)] = good.substr(key_end + 3, 8);
        CHECK(loaded.metadata == expected);
        REQUIRE(loaded.tensors.size() == reference.tensors.size());
        for (const auto& [name, t] : reference.tensors) {
          REQUIRE(loaded.tensors.count(name) == 1);
          const Tensor& l = loaded.tensors.at(name);
          REQUIRE(l.bytes() == t.bytes());
          CHECK(std::memcmp(l.raw_data(), t.raw_data(), t.bytes()) == 0);
        }
        ++renamed_key;
      } catch (const Error& e) {
        CHECK_THAT(e.message(), Catch::StartsWith(flipped_path + ": "));
        ++refused;
      }
    }
  }
  const int flips = static_cast<int>(good.size()) * 8;
  CHECK(refused + renamed_key == flips);
  CHECK(renamed_key <= static_cast<int>(key_end - key_begin) * 8);
  CHECK(refused >= flips - static_cast<int>(key_end - key_begin) * 8);
}

TEST_CASE("checkpoint checksum: a changed data byte is named, with both checksums",
          "[checkpoint][checksum]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000020.safetensors");
  save_safetensors(path, small_tensors(), kMeta);
  const std::string good = read_bytes(path);
  const uint64_t data = header_end(path);
  const std::string recorded = good.substr(find_in(good, "\"tandem.crc32\":\"") + 16, 8);

  // A low mantissa bit of the last float32 of "model.w": still a finite number, only the
  // checksum can tell.
  std::string bytes = good;
  const SafetensorsEntry w = read_safetensors_header(path).entries.at("model.w");
  bytes[data + w.end - 4] = static_cast<char>(bytes[data + w.end - 4] ^ 0x01);
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path + ": checksum mismatch: recorded " + recorded + ", computed ") &&
                        Catch::EndsWith("; the file is corrupt"));
  // The header alone still validates: the checksum needs the data (load refuses the file).
  CHECK(read_safetensors_header(path).entries.size() == 3);

  // The last byte of the file.
  bytes = good;
  bytes.back() = static_cast<char>(bytes.back() ^ 0x80);
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": checksum mismatch"));
}

TEST_CASE("checkpoint checksum: header changes that stay valid JSON are caught", "[checkpoint][checksum]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000020.safetensors");
  save_safetensors(path, small_tensors(), kMeta);
  const std::string good = read_bytes(path);

  // The iteration "20" becomes "21": a well-formed header that would resume elsewhere.
  std::string bytes = good;
  bytes[find_in(bytes, "\"iteration\":\"20\"") + 14] = '1';
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": checksum mismatch"));

  // A tensor renamed: "optim.m" becomes "optim.n".
  bytes = good;
  bytes[find_in(bytes, "\"optim.m\"") + 7] = 'n';
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": checksum mismatch"));

  // The recorded checksum itself: another hex digit, or no hex digit at all.
  const size_t digit = find_in(good, "\"tandem.crc32\":\"") + 16;
  bytes = good;
  bytes[digit] = bytes[digit] == '0' ? '1' : '0';
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": checksum mismatch"));
  bytes[digit] = 'G';
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path + ": corrupt header: metadata \"tandem.crc32\" is \"") &&
                        Catch::Contains("not 8 lowercase hex digits"));
}

TEST_CASE("checkpoint checksum: files without one still load, and the key is reserved",
          "[checkpoint][checksum]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000020.safetensors");
  save_safetensors(path, small_tensors(), kMeta);
  const SafetensorsFile reference = load_safetensors(path);
  CHECK(reference.metadata == kMeta);  // the checksum is the format's, not the caller's

  // Without the key (as another writer, or tandem before the checksum, wrote it): loads
  // bitwise, and a changed data byte goes unnoticed, as before.
  std::string bytes = without_checksum(read_bytes(path));
  REQUIRE(bytes.find("tandem.crc32") == std::string::npos);
  write_bytes(path, bytes);
  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.metadata == kMeta);
  for (const auto& [name, t] : reference.tensors) {
    CHECK(std::memcmp(loaded.tensors.at(name).raw_data(), t.raw_data(), t.bytes()) == 0);
  }
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  write_bytes(path, bytes);
  CHECK_NOTHROW(load_safetensors(path));

  // A round trip through load and save records a fresh checksum over the same content.
  save_safetensors(path, reference.tensors, reference.metadata);
  CHECK(load_safetensors(path).metadata == kMeta);
  CHECK_THROWS_WITH(
      save_safetensors(dir.file("x.safetensors"), {}, {{"tandem.crc32", "00000000"}}),
      Catch::Contains(dir.file("x.safetensors") + ": cannot save metadata \"tandem.crc32\" (reserved"));
  CHECK_FALSE(fs::exists(dir.file("x.safetensors")));
}
