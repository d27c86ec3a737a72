#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "runtime/checkpoint.h"
#include "runtime/rng.h"
#include "tests/test_files.h"
using namespace tandem;
namespace fs = std::filesystem;
using tandem::testing::read_bytes;
using tandem::testing::TempDir;
using tandem::testing::write_bytes;

namespace {

// A hand-made safetensors file: the header as given (padded to 8), then `data_bytes` bytes.
void write_raw_safetensors(const std::string& path, std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i)
    file[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  file += header;
  file.append(data_bytes, '\x11');
  write_bytes(path, file);
}

std::map<std::string, Tensor> sample_tensors() {
  Generator gen(7);
  std::map<std::string, Tensor> t;
  Tensor w = Tensor::empty({3, 5});
  fill_normal(w, 0.0, 1.0, gen);
  t["generator.fc1.weight"] = w;
  Tensor d = Tensor::empty({4}, DType::f64);
  fill_normal(d, 0.0, 1.0, gen);
  t["discriminator.bias"] = d;
  // 16-bit tensors with arbitrary bit patterns (NaN payloads, subnormals, infinities).
  Tensor h = Tensor::empty({2, 3}, DType::f16);
  Tensor b = Tensor::empty({7}, DType::bf16);
  uint16_t h_bits[] = {0x0000, 0x8000, 0x7c00, 0x7e01, 0x0001, 0x3c00};
  uint16_t b_bits[] = {0x3f80, 0xff81, 0x0001, 0x7f80, 0x1234, 0xabcd, 0x8000};
  std::memcpy(h.raw_data(), h_bits, sizeof h_bits);
  std::memcpy(b.raw_data(), b_bits, sizeof b_bits);
  t["ema.half"] = h;
  t["optimizer.bf16"] = b;
  t["iteration"] = Tensor::scalar(1234.0, DType::f64);  // shape []
  Tensor step = Tensor::empty({2}, DType::i64);         // past float64's 2^53: must stay exact
  step.data<int64_t>()[0] = (int64_t{1} << 62) + 3;
  step.data<int64_t>()[1] = -7;
  t["optimizer.step"] = step;
  t["sampler.counts"] = Tensor::full({3}, 41.0, DType::i32);
  t["mask"] = Tensor::full({5}, 255.0, DType::u8);
  t["empty"] = Tensor::zeros({0, 3});                                                   // no bytes
  t["view"] = Tensor::from_values({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8}).narrow_rows(1, 2);  // a view
  return t;
}

}  // namespace

TEST_CASE("safetensors save then load restores every tensor bitwise and the metadata", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000010.safetensors");
  auto tensors = sample_tensors();
  std::map<std::string, std::string> meta = {
      {"iteration", "10"}, {"model", "ring8-mlp"}, {"quote\"slash\\", "line\nbreak\ttab \x01 caf\xc3\xa9"}};
  save_safetensors(path, tensors, meta);

  SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.metadata == meta);
  REQUIRE(loaded.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO(name);
    REQUIRE(loaded.tensors.count(name) == 1);
    const Tensor& l = loaded.tensors.at(name);
    CHECK(l.dtype() == t.dtype());
    CHECK(l.shape() == t.shape());
    REQUIRE(l.bytes() == t.bytes());
    CHECK(std::memcmp(l.raw_data(), t.raw_data(), t.bytes()) == 0);
  }
  CHECK(loaded.tensors.at("view").to_vector() == std::vector<double>{3, 4, 5, 6});

  // The layout itself: little-endian length, a space-padded JSON header, data to the end.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  CHECK(n % 8 == 0);
  size_t data = 0;
  for (const auto& [name, t] : tensors) data += t.bytes();
  CHECK(bytes.size() == 8 + n + data);
  std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find("\"__metadata__\":{") != std::string::npos);
  CHECK(header.find("\"generator.fc1.weight\":{\"dtype\":\"F32\",\"shape\":[3,5],\"data_offsets\":[") !=
        std::string::npos);
  CHECK(header.find("\"ema.half\":{\"dtype\":\"F16\",\"shape\":[2,3]") != std::string::npos);
  CHECK(header.find("\"optimizer.bf16\":{\"dtype\":\"BF16\",\"shape\":[7]") != std::string::npos);
  CHECK(header.find("\"discriminator.bias\":{\"dtype\":\"F64\",\"shape\":[4]") != std::string::npos);
  CHECK(header.find("\"shape\":[]") != std::string::npos);
  CHECK(header.find("\"optimizer.step\":{\"dtype\":\"I64\",\"shape\":[2]") != std::string::npos);
  CHECK(header.find("\"sampler.counts\":{\"dtype\":\"I32\",\"shape\":[3]") != std::string::npos);
  CHECK(header.find("\"mask\":{\"dtype\":\"U8\",\"shape\":[5]") != std::string::npos);
  // f64 data first (widest elements), so it starts 8-aligned at offset 0.
  SafetensorsHeader h = read_safetensors_header(path);
  CHECK(h.data_offset == 8 + n);
  CHECK(h.entries.at("discriminator.bias").begin % 8 == 0);
  CHECK(h.entries.at("iteration").begin % 8 == 0);
  CHECK(h.entries.at("generator.fc1.weight").begin % 4 == 0);

  // Saving again over the file replaces it.
  tensors["iteration"] = Tensor::scalar(99.0, DType::f64);
  save_safetensors(path, tensors);
  SafetensorsFile again = load_safetensors(path);
  CHECK(again.tensors.at("iteration").item() == 99.0);
  CHECK(again.metadata.empty());
}

TEST_CASE("safetensors truncated files name the file and the shortfall", "[checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000020.safetensors");
  save_safetensors(path, sample_tensors(), {{"iteration", "20"}});
  const auto full = fs::file_size(path);
  const uint64_t header_n = read_safetensors_header(path).data_offset - 8;

  fs::resize_file(path, full - 10);
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path + ": truncated: header says " + std::to_string(full - 8 - header_n) +
                                    " bytes of data, file has " + std::to_string(full - 18 - header_n)));
  CHECK_THROWS_WITH(read_safetensors_header(path), Catch::Contains(path + ": truncated"));

  fs::resize_file(path, 40);  // inside the header
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": truncated: header length says " +
                                                            std::to_string(header_n) + " bytes"));
  fs::resize_file(path, 5);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": truncated: the file has 5 bytes"));

  // Trailing bytes are as suspicious as missing ones.
  save_safetensors(path, sample_tensors());
  std::ofstream(path, std::ios::binary | std::ios::app) << "junk";
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path + ": corrupt file: 4 bytes of unexpected data"));

  const std::string missing = dir.file("nope.safetensors");
  CHECK_THROWS_WITH(load_safetensors(missing), Catch::Contains(missing + ": cannot open checkpoint"));
}

TEST_CASE("safetensors corrupt headers are errors naming the file and the problem", "[checkpoint][errors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");

  // Garbage in place of the JSON, length prefix intact.
  save_safetensors(path, sample_tensors());
  std::string bytes = read_bytes(path);
  for (size_t i = 8; i < 40; ++i) bytes[i] = static_cast<char>('A' + i % 26);
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path),
                    Catch::Contains(path + ": corrupt header: invalid JSON at byte 0"));

  // A length prefix of garbage.
  bytes = read_bytes(path);
  for (size_t i = 0; i < 8; ++i) bytes[i] = '\xff';
  write_bytes(path, bytes);
  CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": corrupt header: header length"));

  struct Case {
    const char* header;
    size_t data;
    const char* message;
  };
  const Case cases[] = {
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4,
       ": truncated: header says 8 bytes of data, file has 4 (tensor \"w\" data_offsets [0, 8] out of "
       "range)"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, ": corrupt header: tensors \"a\" [0, 8) and \"b\" [4, 12) overlap"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
       12, ": corrupt header: bytes [4, 8) of the data belong to no tensor (tensor \"b\" begins at 8)"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8,
       ": corrupt header: bytes [0, 4) of the data belong to no tensor"},
      {R"({"e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, ": corrupt header: tensors \"w\" [0, 4) and \"e\" [2, 2) overlap"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
       ": corrupt header: tensor \"w\": shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8"},
      {R"({"w":{"dtype":"I16","shape":[1],"data_offsets":[0,8]}})", 8,
       ": tensor \"w\": unsupported dtype \"I16\" (tandem reads F32, F64, F16, BF16, I32, I64 and U8)"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8, "end before they begin"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4,
       "shape entry must be a non-negative integer"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4, ": corrupt header: tensor \"w\" has no \"data_offsets\""},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       4, "duplicate key \"w\""},
      {R"({"__metadata__":{"k":1}})", 0, ": corrupt header: metadata \"k\" must be a string"},
      {R"([1,2])", 0, ": corrupt header: the header must be a JSON object, found an array"},
      {R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, "only integers are expected"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4,
       "expected '}', found the end of the header"},
      {R"({"a\q":1})", 0, "unknown escape \\q"},
      {"{\"a\nb\":1}", 0, "control character byte 0x0a inside a string"},
  };
  for (const Case& c : cases) {
    INFO(c.header);
    write_raw_safetensors(path, c.header, c.data);
    CHECK_THROWS_WITH(load_safetensors(path), Catch::Contains(path + ": ") && Catch::Contains(c.message));
    CHECK_THROWS_AS(read_safetensors_header(path), Error);
  }

  // The parser accepts what other writers produce: whitespace, escapes, unicode, no metadata.
  write_raw_safetensors(path,
                        "{ \"w\\u00e9\\ud83d\\ude00\" : { \"dtype\" : \"F32\", \"shape\" : [ 1 ],\n"
                        "  \"data_offsets\" : [ 0 , 4 ] }, \"__metadata__\": {\"format\": \"pt\"} }",
                        4);
  SafetensorsFile ok = load_safetensors(path);
  REQUIRE(ok.tensors.count("w\xc3\xa9\xf0\x9f\x98\x80") == 1);
  CHECK(ok.metadata.at("format") == "pt");
}

TEST_CASE("writers of one file with unique temporaries never undo each other's save", "[checkpoint]") {
  // Two jobs filling one cache used to share "<path>.tmp": each unlinked the other's, and
  // one failed "renaming over the final name". Here threads stand for the jobs.
  TempDir dir;
  const std::string path = dir.file("fid-features-0123456789abcdef.ckpt");
  std::atomic<int> failures{0};
  auto writer = [&](double value) {
    for (int i = 0; i < 40; ++i) {
      try {
        save_safetensors(path, {{"w", Tensor::full({256}, value, DType::f64)}}, {}, TemporaryName::unique);
      } catch (const Error&) {
        ++failures;
      }
    }
  };
  std::thread a(writer, 1.0), b(writer, 2.0);
  a.join();
  b.join();
  CHECK(failures == 0);
  const std::vector<double> w = load_safetensors(path).tensors.at("w").to_vector();  // one writer's, whole
  CHECK((std::count(w.begin(), w.end(), 1.0) == 256 || std::count(w.begin(), w.end(), 2.0) == 256));
  int left = 0;  // no temporary left behind
  for (const auto& entry : fs::directory_iterator(dir.path)) left += entry.path().string() != path;
  CHECK(left == 0);
}

TEST_CASE("stale unique temporaries are removed by age; other files, links and fresh ones are kept",
          "[checkpoint]") {
  TempDir dir;
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  auto plant = [&](const std::string& name, bool old) {
    write_bytes(dir.file(name), "half-written");
    if (old) fs::last_write_time(dir.file(name), two_hours_ago);
  };
  plant("fid-real-0123.ckpt.tmp.4242.0badcafe", true);    // a killed writer's: removed
  plant("fid-real-0123.ckpt.tmp.4343.00c0ffee", false);   // being written now: kept
  plant("fid-real-0123.ckpt.tmp", true);                  // a beside temporary: not ours to remove
  plant("fid-real-0123.ckpt.tmp.4242.0badcaf", true);     // 7 hex digits: not a unique name
  plant("fid-real-0123.ckpt.tmp.42x2.0badcafe", true);    // not a process id
  plant("ckpt-000100.safetensors.tmp.1.0badcafe", true);  // another prefix
  plant("fid-real-0123.ckpt", true);                      // a finished file
  write_bytes(dir.file("elsewhere"), "not the cache's");
  fs::last_write_time(dir.file("elsewhere"), two_hours_ago);
  fs::create_symlink(dir.file("elsewhere"), dir.file("fid-link.ckpt.tmp.1.0badcafe"));

  const std::vector<std::string> removed =
      remove_stale_temporaries(dir.path.string(), "fid-", std::chrono::hours(1));
  CHECK(removed == std::vector<std::string>{dir.file("fid-real-0123.ckpt.tmp.4242.0badcafe")});
  for (const char* kept : {"fid-real-0123.ckpt.tmp.4343.00c0ffee", "fid-real-0123.ckpt.tmp",
                           "fid-real-0123.ckpt.tmp.4242.0badcaf", "fid-real-0123.ckpt.tmp.42x2.0badcafe",
                           "ckpt-000100.safetensors.tmp.1.0badcafe", "fid-real-0123.ckpt", "elsewhere"})
    CHECK(fs::exists(dir.file(kept)));
  CHECK(fs::is_symlink(dir.file("fid-link.ckpt.tmp.1.0badcafe")));
  CHECK(remove_stale_temporaries(dir.file("no-such-dir"), "fid-", std::chrono::hours(1)).empty());
}

TEST_CASE("safetensors saves through a temporary file and errors name the path", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ckpt-000100.safetensors");
  write_bytes(path + ".tmp", "stale half-written file from a crash");
  save_safetensors(path, sample_tensors());
  CHECK(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
  CHECK(load_safetensors(path).tensors.size() == sample_tensors().size());

  // A save that cannot write its temporary file fails and leaves the previous checkpoint whole.
  const std::string before = read_bytes(path);
  fs::create_directories(path + ".tmp/blocker");
  auto other = sample_tensors();
  other["iteration"] = Tensor::scalar(5.0, DType::f64);
  CHECK_THROWS_WITH(save_safetensors(path, other),
                    Catch::Contains(path + ": cannot save checkpoint: cannot create " + path + ".tmp"));
  CHECK(read_bytes(path) == before);
  fs::remove_all(path + ".tmp");

  const std::string unwritable = dir.file("no/such/dir/ckpt.safetensors");
  CHECK_THROWS_WITH(
      save_safetensors(unwritable, sample_tensors()),
      Catch::Contains(unwritable + ": cannot save checkpoint: cannot create " + unwritable + ".tmp"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"__metadata__", Tensor::zeros({1})}}),
                    Catch::Contains("reserved"));
  CHECK_THROWS_WITH(save_safetensors(path, {{"x", Tensor()}}), Catch::Contains("\"x\": it is undefined"));
  CHECK(load_safetensors(path).tensors.size() == sample_tensors().size());  // untouched by the failures
}

TEST_CASE("find_latest_checkpoint picks the highest complete iteration", "[checkpoint]") {
  TempDir dir;
  const std::string d = dir.path.string();
  CHECK_FALSE(find_latest_checkpoint(d, "ckpt").has_value());
  CHECK_FALSE(find_latest_checkpoint(dir.file("missing"), "ckpt").has_value());

  CHECK(checkpoint_path(d, "ckpt", 100) == dir.file("ckpt-000100.safetensors"));
  CHECK(checkpoint_path(d, "ckpt", 1234567) == dir.file("ckpt-1234567.safetensors"));
  auto t = sample_tensors();
  for (int64_t it : {100, 200, 90, 1000}) save_safetensors(checkpoint_path(d, "ckpt", it), t);
  CHECK(find_latest_checkpoint(d, "ckpt") == dir.file("ckpt-001000.safetensors"));

  // Newer-looking leftovers of a crash: a stale .tmp and a torn file under a final name.
  write_bytes(dir.file("ckpt-005000.safetensors.tmp"), "partial");
  save_safetensors(checkpoint_path(d, "ckpt", 3000), t);
  fs::resize_file(dir.file("ckpt-003000.safetensors"),
                  fs::file_size(dir.file("ckpt-003000.safetensors")) - 1);
  write_bytes(dir.file("ckpt-004000.safetensors"), "not a checkpoint");
  // Other names that must not match.
  save_safetensors(dir.file("other-009000.safetensors"), t);
  save_safetensors(dir.file("ckpt-9x00.safetensors"), t);
  save_safetensors(dir.file("ckpt-.safetensors"), t);
  fs::create_directory(dir.file("ckpt-008000.safetensors"));
  CHECK(find_latest_checkpoint(d, "ckpt") == dir.file("ckpt-001000.safetensors"));

  save_safetensors(checkpoint_path(d, "ckpt", 12000), t);  // more digits than the padding
  CHECK(find_latest_checkpoint(d, "ckpt") == dir.file("ckpt-012000.safetensors"));
  CHECK(find_latest_checkpoint(d, "other") == dir.file("other-009000.safetensors"));
}

TEST_CASE("safetensors bytes match the reference implementation's own test vectors", "[checkpoint][format]") {
  // huggingface/safetensors tensor.rs: test_serialization, test_serialization_forced_alignement, test_empty,
  // each with one more metadata string, the checksum. Its values were computed apart from tandem
  // (Python's zlib.crc32 of the fixed form of the header that checkpoint.h describes, then the data).
  TempDir dir;
  const std::string path = dir.file("ref.safetensors");
  auto le64 = [](uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
    return s;
  };
  const std::string floats("\0\0\0\0\0\0\x80\x3f\0\0\0\x40\0\0\x40\x40\0\0\x80\x40\0\0\xa0\x40", 24);  // 0..5

  save_safetensors(path, {{"attn.0", Tensor::from_values({1, 2, 3}, {0, 1, 2, 3, 4, 5})}});
  CHECK(read_bytes(path) == le64(112) +
                                R"({"__metadata__":{"tandem.crc32":"3f5a16a3"},)"
                                R"("attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
                                "     " + floats);

  save_safetensors(path, {{"attn0", Tensor::from_values({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5})}});
  CHECK(read_bytes(path) == le64(112) +
                                R"({"__metadata__":{"tandem.crc32":"a1128726"},)"
                                R"("attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                                "    " + floats);

  save_safetensors(path, {});
  CHECK(read_bytes(path) == le64(48) + R"({"__metadata__":{"tandem.crc32":"a3a6bf43"}})" + "    ");
  save_safetensors(path, {}, {{"framework", "pt"}});
  CHECK(read_bytes(path) ==
        le64(64) + R"({"__metadata__":{"framework":"pt","tandem.crc32":"c82dc889"}})" + "   ");
  CHECK(load_safetensors(path).metadata == std::map<std::string, std::string>{{"framework", "pt"}});
}
