// The TensorBoard writer's framing against published values (CRC-32C of "123456789" is
// 0xe3069283, RFC 3720) and its refusals; tensorboard_test.sh reads whole files back.
#include <catch2/catch.hpp>

#if TANDEM_HAVE_TENSORBOARD
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "models/training/tensorboard_writer.h"
#include "runtime/error.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::training;
using namespace tandem::testing;

TEST_CASE("CRC-32C and TFRecord framing against hand-worked values", "[tensorboard]") {
  CHECK(crc32c("123456789") == 0xe3069283u);
  CHECK(crc32c("") == 0u);
  const uint32_t c = crc32c("123456789");
  CHECK(masked_crc32c("123456789") == static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
  const std::string record = tfrecord("abc");
  REQUIRE(record.size() == 8 + 4 + 3 + 4);
  CHECK(record.substr(0, 8) == std::string("\x03\0\0\0\0\0\0\0", 8));  // little-endian length
  CHECK(record.substr(12, 3) == "abc");
}

TEST_CASE("the writer names its file by time and host and refuses what it cannot write",
          "[tensorboard][errors]") {
  TempDir tmp("tensorboard");
  TensorBoardWriter a(tmp.file("tb")), b(tmp.file("tb"));  // made when missing; the same second
  CHECK(std::filesystem::path(a.path()).filename().string().starts_with("events.out.tfevents."));
  CHECK(a.path() != b.path());
  CHECK_THROWS_WITH(a.add_image("x", "png", 1, 1, 5, 0),
                    Catch::Contains("channels must be 1, 2, 3 or 4, not 5"));
  write_bytes(tmp.file("not.png"), "hello, not a picture at all");
  CHECK_THROWS_WITH(a.add_png_file("x", tmp.file("not.png"), 0), Catch::Contains("is not a PNG file"));
  write_bytes(tmp.file("file"), "");
  CHECK_THROWS_WITH(TensorBoardWriter(tmp.file("file")),
                    Catch::Contains("cannot make the TensorBoard directory"));
}

TEST_CASE("the writer never writes through a link planted at an event file's name", "[tensorboard][errors]") {
  namespace fs = std::filesystem;
  TempDir tmp("tensorboard_links");
  const fs::path dir = tmp.file("tb");
  const std::string first = TensorBoardWriter(dir.string()).path();
  // events.out.tfevents.<seconds>.<host>: plant dangling links at every name the next
  // writer could pick in this second and the next two.
  const std::string name = fs::path(first).filename().string();
  const std::string prefix = "events.out.tfevents.";
  const size_t dot = name.find('.', prefix.size());
  const long long seconds = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  const std::string host = name.substr(dot);
  int planted = 0;
  for (long long s = seconds; s <= seconds + 2; ++s)
    for (int n = 0; n <= 3; ++n) {
      // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "." + std::string.
      std::string link_name = prefix + std::to_string(s) + host;
      if (n) link_name.append(".").append(std::to_string(n));
      const fs::path link = dir / link_name;
      if (fs::exists(fs::symlink_status(link))) continue;
      fs::create_symlink(tmp.file("target" + std::to_string(planted++)), link);
    }
  TensorBoardWriter writer(dir.string());
  writer.add_scalar("loss", 1.0, 0);
  CHECK(fs::is_regular_file(fs::symlink_status(writer.path())));
  CHECK(fs::file_size(writer.path()) > 0);
  for (int i = 0; i < planted; ++i) CHECK_FALSE(fs::exists(tmp.file("target" + std::to_string(i))));
}

TEST_CASE("a write cut short (a full disk) leaves the file in whole records", "[tensorboard][errors]") {
  namespace fs = std::filesystem;
  TempDir tmp("tensorboard_full");
  TensorBoardWriter writer(tmp.file("tb"));
  writer.add_scalar("loss", 1.0, 0);
  const uintmax_t whole = fs::file_size(writer.path());
  // A file-size limit 100 bytes past the end stands in for a disk that fills: the next
  // event (a 5000-byte picture) is written in part, then refused (EFBIG; SIGXFSZ ignored).
  struct rlimit before {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &before) == 0);
  struct rlimit limited = before;
  limited.rlim_cur = static_cast<rlim_t>(whole + 100);
  auto* previous = std::signal(SIGXFSZ, SIG_IGN);
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &limited) == 0);
  writer.add_image("samples", std::string(5000, 'x'), 10, 10, 1, 1);
  writer.add_scalar("loss", 2.0, 2);  // after a failure: nothing more is written
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  CHECK(fs::file_size(writer.path()) == whole);
  // The file reads as whole records: each length, its CRC, the data, the data's CRC.
  std::ifstream in(writer.path(), std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  size_t at = 0, records = 0;
  while (at < bytes.size()) {
    REQUIRE(at + 12 <= bytes.size());
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[at + i]);
    REQUIRE(at + 12 + length + 4 <= bytes.size());
    CHECK(tfrecord(bytes.substr(at + 12, length)) == bytes.substr(at, 12 + length + 4));
    at += 12 + length + 4;
    ++records;
  }
  CHECK(records == 2);  // file_version and the first scalar
}
#endif

#if TANDEM_HAVE_TENSORBOARD
namespace {

// An Event's step, read from its wire format: wall_time (field 1, fixed64: tag 0x09 and 8
// bytes), then step (field 2, varint: tag 0x10) when it is not 0.
int64_t step_of(const std::string& data) {
  size_t at = 0;
  if (at < data.size() && data[at] == 0x09) at += 9;
  if (at >= data.size() || data[at] != 0x10) return 0;
  uint64_t step = 0;
  for (int shift = 0; ++at < data.size(); shift += 7) {
    step |= static_cast<uint64_t>(static_cast<unsigned char>(data[at]) & 0x7f) << shift;
    if ((static_cast<unsigned char>(data[at]) & 0x80) == 0) break;
  }
  return static_cast<int64_t>(step);
}

// The steps of the events in the file at `path`, in order (the file version's is 0).
std::vector<int64_t> steps_in(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  size_t whole = 0;
  std::vector<int64_t> steps;
  for (const std::string& data : tfrecords_in(bytes, &whole)) steps.push_back(step_of(data));
  CHECK(whole == bytes.size());
  return steps;
}

}  // namespace

TEST_CASE("a resumed run's writer cuts the folder's event files back to the resumed step, links untouched",
          "[tensorboard][resume]") {
  namespace fs = std::filesystem;
  TempDir tmp("tensorboard_resume");
  const std::string dir = tmp.file("tb");
  std::string first;
  {
    TensorBoardWriter writer(dir);
    first = writer.path();
    for (int64_t step = 10; step <= 50; step += 10)
      writer.add_scalar("loss", 0.5 * static_cast<double>(step), step);
    writer.add_image("samples", std::string(64, 'x'), 4, 4, 1, 40);
  }
  REQUIRE(steps_in(first) == std::vector<int64_t>{0, 10, 20, 30, 40, 50, 40});
  // A link named like an event file, to a file outside the folder: neither read nor rewritten.
  const std::string outside = tmp.file("outside");
  fs::copy_file(first, outside);
  fs::create_symlink(outside, fs::path(dir) / "events.out.tfevents.1.linked");
  const std::string untouched = read_bytes(outside);

  TensorBoardWriter resumed(dir, /*resume_step=*/30);
  CHECK(steps_in(first) == std::vector<int64_t>{0, 10, 20, 30});
  CHECK(steps_in(resumed.path()) == std::vector<int64_t>{0});
  CHECK(read_bytes(outside) == untouched);
  CHECK(fs::is_symlink(fs::path(dir) / "events.out.tfevents.1.linked"));
  // Nothing after step 30 is left: a second resume from there changes no byte.
  const std::string cut = read_bytes(first);
  TensorBoardWriter again(dir, 30);
  CHECK(read_bytes(first) == cut);
  // A torn file is left as it is (and named in a warning).
  write_bytes(tmp.file("tb/events.out.tfevents.2.torn"), cut.substr(0, cut.size() - 3));
  TensorBoardWriter past_torn(dir, 10);
  CHECK(read_bytes(tmp.file("tb/events.out.tfevents.2.torn")) == cut.substr(0, cut.size() - 3));
  CHECK(steps_in(first) == std::vector<int64_t>{0, 10});
}
#endif
