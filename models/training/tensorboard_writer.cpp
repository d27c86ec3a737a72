#include "models/training/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "runtime/error.h"
#include "runtime/file_write.h"
#include "tensorboard_event.pb.h"

namespace tandem::training {

namespace fs = std::filesystem;

namespace {

// Event files of one second and host get ".1", ".2", ...; the bound keeps the search finite.
constexpr int kMaxNameSuffix = 10000;

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string little_endian(uint64_t value, int bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

uint64_t little_endian_at(const std::string& bytes, size_t at, int count) {
  uint64_t v = 0;
  for (int i = count - 1; i >= 0; --i)
    v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

// The file's bytes, or nothing when it cannot be opened or read.
std::optional<std::string> read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in.good() && !in.eof()) return std::nullopt;
  return bytes.str();
}

// Cuts one event file to its events of steps <= last_step (resume: the contract).
void cut_events_after(const fs::path& path, int64_t last_step) {
  const std::optional<std::string> read = read_whole_file(path.string());
  if (!read) {
    write_stderr_line("tandem: warning: cannot read " + path.string() +
                      "; its events after the resumed step, if any, stay in TensorBoard");
    return;
  }
  const std::string& bytes = *read;
  size_t whole = 0;
  const std::vector<std::string> records = tfrecords_in(bytes, &whole);
  if (whole != bytes.size()) {
    write_stderr_line("tandem: warning: " + path.string() +
                      " does not read as TensorBoard events past byte " + std::to_string(whole) +
                      "; left as it is, its events after the resumed step included");
    return;
  }
  std::vector<const std::string*> kept;
  for (const std::string& data : records) {
    tensorboard::Event event;
    if (!event.ParseFromString(data) || event.step() <= last_step) kept.push_back(&data);
  }
  if (kept.size() == records.size()) return;
  const std::string failure = replace_file(path.string(), [&](std::FILE* out) {
    for (const std::string* data : kept) {
      const std::string record = tfrecord(*data);
      std::fwrite(record.data(), 1, record.size(), out);
    }
  });
  if (!failure.empty())
    write_stderr_line("tandem: warning: " + failure + "; the events of " + path.string() + " after step " +
                      std::to_string(last_step) + " stay in TensorBoard");
}

uint32_t big_endian32(const std::string& bytes, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

}  // namespace

uint32_t crc32c(const std::string& bytes) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t crc = 0xffffffffu;
  for (char c : bytes) crc = table[(crc ^ static_cast<unsigned char>(c)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t masked_crc32c(const std::string& bytes) { return mask(crc32c(bytes)); }

std::string tfrecord(const std::string& data) {
  const std::string length = little_endian(data.size(), 8);
  return length + little_endian(masked_crc32c(length), 4) + data + little_endian(masked_crc32c(data), 4);
}

std::vector<std::string> tfrecords_in(const std::string& bytes, size_t* whole_bytes) {
  std::vector<std::string> records;
  size_t at = 0;
  while (at + 12 <= bytes.size()) {
    const std::string length = bytes.substr(at, 8);
    if (static_cast<uint32_t>(little_endian_at(bytes, at + 8, 4)) != masked_crc32c(length)) break;
    const uint64_t n = little_endian_at(bytes, at, 8);
    if (n > bytes.size() - at - 12 || bytes.size() - at - 12 - n < 4) break;
    std::string data = bytes.substr(at + 12, n);
    if (static_cast<uint32_t>(little_endian_at(bytes, at + 12 + n, 4)) != masked_crc32c(data)) break;
    records.push_back(std::move(data));
    at += 12 + n + 4;
  }
  if (whole_bytes != nullptr) *whole_bytes = at;
  return records;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TANDEM_CHECK(!ec && fs::is_directory(dir), "cannot make the TensorBoard directory "
                                                 << dir << " (" << (ec ? ec.message() : "not a directory")
                                                 << ")");
  if (resume_step > 0) {
    std::vector<fs::path> event_files;  // listed first: a cut renames files into the folder
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("events.out.tfevents.") && !name.ends_with(".tmp") && !entry.is_symlink(ec) &&
          entry.is_regular_file(ec))
        event_files.push_back(entry.path());
    }
    for (const fs::path& path : event_files) cut_events_after(path, resume_step);
  }
  const auto seconds = static_cast<int64_t>(unix_seconds());
  const std::string base =
      (fs::path(dir) / ("events.out.tfevents." + std::to_string(seconds) + "." + host_name())).string();
  path_ = base;
  for (int n = 1; n <= kMaxNameSuffix; ++n) {
    fd_ = open_no_follow(path_, O_WRONLY | O_CREAT | O_EXCL);
    if (fd_ >= 0 || errno != EEXIST) break;
    path_ = base + "." + std::to_string(n);
  }
  TANDEM_CHECK(fd_ >= 0, "cannot create " << path_ << " (" << open_failure(errno) << ")");
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_file_version("brain.Event:2");
  write_event(event.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  add_scalars(step, {{tag, value}});
}

void TensorBoardWriter::add_scalars(int64_t step, const Scalars& scalars) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  for (const auto& [tag, value] : scalars) {
    tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_event(event.SerializeAsString());
}

void TensorBoardWriter::add_image(const std::string& tag, const std::string& png, int height, int width,
                                  int channels, int64_t step) {
  TANDEM_CHECK(channels >= 1 && channels <= 4,
               "add_image '" << tag << "': channels must be 1, 2, 3 or 4, not " << channels);
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  tensorboard::Summary::Image* image = v->mutable_image();
  image->set_height(height);
  image->set_width(width);
  image->set_colorspace(channels);
  image->set_encoded_image_string(png);
  write_event(event.SerializeAsString());
}

void TensorBoardWriter::add_png_file(const std::string& tag, const std::string& path, int64_t step) {
  const std::optional<std::string> read = read_whole_file(path);
  TANDEM_CHECK(read, "cannot read " << path);
  const std::string& png = *read;
  // The signature, then the IHDR chunk: length, "IHDR", width, height (big-endian), bit
  // depth, colour type (0 gray, 2 RGB, 4 gray + alpha, 6 RGBA).
  TANDEM_CHECK(
      png.size() >= 26 && png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0 && png.compare(12, 4, "IHDR") == 0,
      path << " is not a PNG file");
  const int color_type = static_cast<unsigned char>(png[25]);
  const int channels = color_type == 0   ? 1
                       : color_type == 4 ? 2
                       : color_type == 2 ? 3
                       : color_type == 6 ? 4
                                         : 0;
  TANDEM_CHECK(channels > 0, path << ": PNG colour type " << color_type << " (a palette) is not supported");
  add_image(tag, png, static_cast<int>(big_endian32(png, 20)), static_cast<int>(big_endian32(png, 16)),
            channels, step);
}

void TensorBoardWriter::write_event(const std::string& serialized) {
  if (write_failed_) return;
  // Unbuffered: each event reaches the file as it is written.
  const std::string record = tfrecord(serialized);
  size_t written = 0;
  while (written < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + written, record.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "nothing written";
      write_failed_ = true;
      // A record cut short would end the file in a torn record: take back what of it was
      // written, so that the file holds whole records only.
      const bool untorn = written == 0 || ::ftruncate(fd_, static_cast<off_t>(complete_bytes_)) == 0;
      write_stderr_line(
          "tandem: warning: cannot write " + path_ + " (" + why +
          "); no more TensorBoard events go there, training goes on" +
          (untorn ? "" : "; its last record is torn (" + std::string(std::strerror(errno)) + ")"));
      return;
    }
    written += static_cast<size_t>(n);
  }
  complete_bytes_ += record.size();
}

}  // namespace tandem::training
