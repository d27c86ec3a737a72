#include "runtime/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/file_write.h"
#include "runtime/json_subset.h"

namespace tandem {

// safetensors stores little-endian data; we write host memory as is.
static_assert(std::endian::native == std::endian::little, "checkpoint I/O assumes a little-endian host");

namespace {

// "<path>.tmp.<pid>.<8 hex digits>": no other process or thread picks the same name.
std::string unique_temporary_name(const std::string& path) {
  static std::atomic<uint32_t> counter{0};
  std::random_device device;
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08x", static_cast<long>(::getpid()),
                static_cast<unsigned>(device() ^ (counter.fetch_add(1) * 0x9e3779b9u)));
  return path + suffix;
}

// True for a name unique_temporary_name gave: "<stem>.tmp.<digits>.<8 hex digits>".
bool is_unique_temporary_name(const std::string& name) {
  const size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos) return false;
  const std::string tail = name.substr(tmp + 5);  // "<pid>.<hex>"
  const size_t dot = tail.find('.');
  if (dot == std::string::npos || dot == 0 || tail.size() - dot - 1 != 8) return false;
  const auto all = [](std::string_view t, int (*is)(int)) {
    return std::all_of(t.begin(), t.end(), [is](unsigned char c) { return is(c) != 0; });
  };
  return all(std::string_view(tail).substr(0, dot), ::isdigit) &&
         all(std::string_view(tail).substr(dot + 1), ::isxdigit);
}

// TANDEM_FAULT_SLOW_FSYNC_MS=N (tests only): every save waits N ms before its fsync, which
// widens the window in which two writers of one file overlap (tests/train/mpi/fid_cache_jobs_test.sh).
void maybe_slow_fsync_for_tests() {
  static const long delay_ms = [] {
    const char* value = std::getenv("TANDEM_FAULT_SLOW_FSYNC_MS");
    return value == nullptr ? 0L : std::max(0L, std::strtol(value, nullptr, 10));
  }();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}

namespace fs = std::filesystem;

// The Rust reference implementation refuses headers above 100 MB; so do we, before
// allocating anything a corrupt length prefix asks for.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kChecksumKey = "tandem.crc32";

std::string errno_text() { return std::strerror(errno); }

// ---- safetensors dtype names.

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
  }
  return "?";
}

std::optional<DType> parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "F64") return DType::f64;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "U8") return DType::u8;
  return std::nullopt;
}

// ---- The checksum.

// CRC-32 (zlib's) over any number of bytes; zlib takes at most 4 GiB per call.
uint32_t crc32_update(uint32_t crc, const void* data, size_t bytes) {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(bytes, 1u << 30));
    crc = static_cast<uint32_t>(::crc32(crc, p, chunk));
    p += chunk;
    bytes -= chunk;
  }
  return crc;
}

// What the checksum covers of the header: everything it says but the checksum itself
// (`metadata` is without it), in one fixed form, so that no flipped byte of meaning goes
// unnoticed (a digit of an iteration in the metadata, a letter of a tensor's name) while a
// writer's spacing and key order do not matter. The form is compact JSON: "__metadata__"
// first (left out when empty), its keys in byte order, then the tensors in name order, each
// {"dtype":..,"shape":[..],"data_offsets":[b,e]}.
std::string checksummed_header(const std::map<std::string, std::string>& metadata,
                               const std::map<std::string, SafetensorsEntry>& entries) {
  std::string out = "{";
  if (!metadata.empty()) {
    append_json_string(out, kMetadataKey);
    out += ":{";
    for (const auto& [key, value] : metadata) {
      if (out.back() != '{') out += ',';
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += '}';
  }
  for (const auto& [name, e] : entries) {
    if (out.size() > 1) out += ',';
    append_json_string(out, name);
    out += ":{\"dtype\":\"";
    out += safetensors_dtype(e.dtype);
    out += "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(e.shape[i]);
    }
    out += "],\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  out += '}';
  return out;
}

std::string checksum_text(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

// Exactly as checksum_text writes it: 8 lowercase hex digits.
std::optional<uint32_t> parse_checksum(const std::string& text) {
  if (text.size() != 8) return std::nullopt;
  uint32_t v = 0;
  for (char c : text) {
    int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (digit < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint32_t>(digit);
  }
  return v;
}

// ---- Files.

// Closes on scope exit so every early throw releases the handle.
struct File {
  std::FILE* fp = nullptr;
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (fp != nullptr) std::fclose(fp);
  }
};

uint64_t read_le_u64(const unsigned char* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

void read_exact(std::FILE* fp, void* dst, size_t bytes, uint64_t offset, const std::string& path,
                const std::string& what) {
  if (fseeko(fp, static_cast<off_t>(offset), SEEK_SET) != 0) {
    TANDEM_FAIL(path << ": cannot seek to byte " << offset << " to read " << what << ": " << errno_text());
  }
  size_t got = bytes == 0 ? 0 : std::fread(dst, 1, bytes, fp);
  if (got != bytes) {
    TANDEM_FAIL(path << ": truncated: reading " << what << " wanted " << bytes << " bytes at offset "
                     << offset << ", got " << got
                     << (std::ferror(fp) ? " (" + errno_text() + ")" : std::string()));
  }
}

uint64_t checked_u64(const Json& v, const std::string& path, const std::string& where) {
  TANDEM_CHECK(v.kind == Json::Kind::integer && !v.negative,
               path << ": corrupt header: " << where << " must be a non-negative integer, found "
                    << (v.kind == Json::Kind::integer ? "a negative integer" : json_kind_name(v.kind)));
  return v.magnitude;
}

SafetensorsEntry parse_entry(const std::string& name, const Json& v, const std::string& path) {
  const std::string where = "tensor \"" + name + "\"";
  TANDEM_CHECK(v.kind == Json::Kind::object, path << ": corrupt header: " << where
                                                  << " must be an object, found " << json_kind_name(v.kind));
  const Json* dtype = v.find("dtype");
  const Json* shape = v.find("shape");
  const Json* offsets = v.find("data_offsets");
  TANDEM_CHECK(dtype != nullptr, path << ": corrupt header: " << where << " has no \"dtype\"");
  TANDEM_CHECK(shape != nullptr, path << ": corrupt header: " << where << " has no \"shape\"");
  TANDEM_CHECK(offsets != nullptr, path << ": corrupt header: " << where << " has no \"data_offsets\"");
  TANDEM_CHECK(dtype->kind == Json::Kind::string,
               path << ": corrupt header: " << where << ": \"dtype\" must be a string");
  std::optional<DType> dt = parse_safetensors_dtype(dtype->text);
  TANDEM_CHECK(dt.has_value(), path << ": " << where << ": unsupported dtype \"" << dtype->text
                                    << "\" (tandem reads F32, F64, F16, BF16, I32, I64 and U8)");
  SafetensorsEntry e;
  e.dtype = *dt;
  TANDEM_CHECK(shape->kind == Json::Kind::array,
               path << ": corrupt header: " << where << ": \"shape\" must be an array");
  uint64_t numel = 1;
  for (const Json& d : shape->values) {
    uint64_t n = checked_u64(d, path, where + " shape entry");
    TANDEM_CHECK(n <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                     (n == 0 || numel <= std::numeric_limits<uint64_t>::max() / 64 / n),
                 path << ": corrupt header: " << where << ": shape is too large");
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  TANDEM_CHECK(offsets->kind == Json::Kind::array && offsets->values.size() == 2,
               path << ": corrupt header: " << where << ": \"data_offsets\" must be an array [begin, end]");
  e.begin = checked_u64(offsets->values[0], path, where + " data_offsets[0]");
  e.end = checked_u64(offsets->values[1], path, where + " data_offsets[1]");
  TANDEM_CHECK(e.begin <= e.end, path << ": corrupt header: " << where << ": data_offsets [" << e.begin
                                      << ", " << e.end << "] end before they begin");
  uint64_t bytes = numel * dtype_size(e.dtype);
  TANDEM_CHECK(e.end - e.begin == bytes, path << ": corrupt header: " << where << ": shape "
                                              << shape_str(e.shape) << " of " << dtype->text << " needs "
                                              << bytes << " bytes but data_offsets [" << e.begin << ", "
                                              << e.end << "] span " << (e.end - e.begin));
  return e;
}

SafetensorsHeader read_header(std::FILE* fp, const std::string& path, uint64_t file_bytes) {
  TANDEM_CHECK(file_bytes >= 8, path << ": truncated: the file has " << file_bytes
                                     << " bytes, too short for the 8-byte header length");
  unsigned char prefix[8];
  read_exact(fp, prefix, 8, 0, path, "the header length");
  uint64_t header_bytes = read_le_u64(prefix);
  TANDEM_CHECK(header_bytes <= kMaxHeaderBytes, path << ": corrupt header: header length " << header_bytes
                                                     << " is implausibly large (not a safetensors file?)");
  TANDEM_CHECK(header_bytes <= file_bytes - 8, path << ": truncated: header length says " << header_bytes
                                                    << " bytes, the file has only " << (file_bytes - 8)
                                                    << " after the 8-byte length");
  std::string text(header_bytes, '\0');
  read_exact(fp, text.data(), text.size(), 8, path, "the header");

  Json root = parse_json_subset(text, path, "header");
  TANDEM_CHECK(
      root.kind == Json::Kind::object,
      path << ": corrupt header: the header must be a JSON object, found " << json_kind_name(root.kind));

  SafetensorsHeader h;
  h.data_offset = 8 + header_bytes;
  const uint64_t data_bytes = file_bytes - h.data_offset;
  for (size_t i = 0; i < root.keys.size(); ++i) {
    const std::string& key = root.keys[i];
    const Json& value = root.values[i];
    if (key == kMetadataKey) {
      TANDEM_CHECK(value.kind == Json::Kind::object,
                   path << ": corrupt header: \"__metadata__\" must be an object of strings");
      for (size_t j = 0; j < value.keys.size(); ++j) {
        TANDEM_CHECK(value.values[j].kind == Json::Kind::string,
                     path << ": corrupt header: metadata \"" << value.keys[j] << "\" must be a string, found "
                          << json_kind_name(value.values[j].kind));
        if (value.keys[j] == kChecksumKey) {
          h.checksum = parse_checksum(value.values[j].text);
          TANDEM_CHECK(h.checksum.has_value(), path << ": corrupt header: metadata \"" << kChecksumKey
                                                    << "\" is \"" << value.values[j].text
                                                    << "\", not 8 lowercase hex digits");
          continue;
        }
        h.metadata[value.keys[j]] = value.values[j].text;
      }
      continue;
    }
    h.entries[key] = parse_entry(key, value, path);
  }

  // Offsets: inside the data section and packed as the format lays them out, one tensor
  // after another from byte 0 to the end of the file: no byte shared, none unaccounted for.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  uint64_t data_end = 0;
  const std::string* last = nullptr;
  for (const auto& [name, e] : h.entries) {
    order.emplace_back(&name, &e);
    if (last == nullptr || e.end > data_end) last = &name;
    data_end = std::max(data_end, e.end);
  }
  if (data_end > data_bytes) {
    const SafetensorsEntry& e = h.entries.at(*last);
    TANDEM_FAIL(path << ": truncated: header says " << data_end << " bytes of data, file has " << data_bytes
                     << " (tensor \"" << *last << "\" data_offsets [" << e.begin << ", " << e.end
                     << "] out of range)");
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin
                                              : a.second->end < b.second->end;
  });
  uint64_t at = 0;  // where the next tensor must begin
  const std::pair<const std::string*, const SafetensorsEntry*>* prev = nullptr;
  for (const auto& item : order) {
    const SafetensorsEntry& e = *item.second;
    if (e.begin < at) {
      TANDEM_FAIL(path << ": corrupt header: tensors \"" << *prev->first << "\" [" << prev->second->begin
                       << ", " << prev->second->end << ") and \"" << *item.first << "\" [" << e.begin << ", "
                       << e.end << ") overlap");
    }
    TANDEM_CHECK(e.begin == at, path << ": corrupt header: bytes [" << at << ", " << e.begin
                                     << ") of the data belong to no tensor (tensor \"" << *item.first
                                     << "\" begins at " << e.begin << ")");
    at = e.end;
    prev = &item;
  }
  TANDEM_CHECK(data_end == data_bytes, path << ": corrupt file: " << (data_bytes - data_end)
                                            << " bytes of unexpected data after the " << data_end
                                            << " bytes of tensors the header describes");
  return h;
}

uint64_t file_size_of(std::FILE* fp, const std::string& path) {
  struct stat st {};
  TANDEM_CHECK(fstat(fileno(fp), &st) == 0, path << ": cannot stat: " << errno_text());
  TANDEM_CHECK(S_ISREG(st.st_mode), path << ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

void open_for_reading(File& f, const std::string& path) {
  f.fp = std::fopen(path.c_str(), "rb");
  TANDEM_CHECK(f.fp != nullptr, path << ": cannot open checkpoint: " << errno_text());
}

std::string parent_dir(const std::string& path) {
  fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata, TemporaryName temporary) {
  // Widest elements first (then by name), as the reference writer does, so every tensor
  // starts aligned to its element size within the 8-aligned data section.
  std::vector<std::pair<std::string, Tensor>> order;
  for (const auto& [name, t] : tensors) {
    TANDEM_CHECK(name != kMetadataKey, path << ": cannot save a tensor named \"__metadata__\" (reserved)");
    TANDEM_CHECK(t.defined(), path << ": cannot save tensor \"" << name << "\": it is undefined");
    order.emplace_back(name, t.device().is_cpu() ? t : t.to(Device::cpu()));
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return dtype_size(a.second.dtype()) > dtype_size(b.second.dtype());
  });
  TANDEM_CHECK(metadata.count(kChecksumKey) == 0,
               path << ": cannot save metadata \"" << kChecksumKey << "\" (reserved: the writer records it)");

  // The checksum: the header's meaning, then the data in file order.
  std::map<std::string, SafetensorsEntry> entries;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    entries[name] = {.dtype = t.dtype(), .shape = t.shape(), .begin = offset, .end = offset + t.bytes()};
    offset += t.bytes();
  }
  const std::string covered = checksummed_header(metadata, entries);
  uint32_t crc = crc32_update(0, covered.data(), covered.size());
  for (const auto& [name, t] : order) crc = crc32_update(crc, t.raw_data(), t.bytes());
  std::map<std::string, std::string> recorded = metadata;
  recorded[kChecksumKey] = checksum_text(crc);

  // The metadata (never empty: it holds the checksum), then the tensors in file order.
  std::string header = "{";
  append_json_string(header, kMetadataKey);
  header += ":{";
  bool first = true;
  for (const auto& [key, value] : recorded) {
    if (!first) header += ',';
    first = false;
    append_json_string(header, key);
    header += ':';
    append_json_string(header, value);
  }
  header += '}';
  for (const auto& [name, t] : order) {
    const SafetensorsEntry& e = entries.at(name);
    header += ',';
    append_json_string(header, name);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype(t.dtype());
    header += "\",\"shape\":[";
    for (size_t i = 0; i < t.shape().size(); ++i) {
      if (i > 0) header += ',';
      header += std::to_string(t.shape()[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');

  const std::string tmp = temporary == TemporaryName::unique ? unique_temporary_name(path) : path + ".tmp";
  std::FILE* fp = fopen_fresh(tmp);  // never through a link planted at the temporary's name
  TANDEM_CHECK(fp != nullptr,
               path << ": cannot save checkpoint: cannot create " << tmp << ": " << errno_text());
  auto fail_write = [&](const std::string& what) {
    std::string err = errno_text();
    if (fp != nullptr) std::fclose(fp);
    std::remove(tmp.c_str());
    TANDEM_FAIL(path << ": cannot save checkpoint: " << what << " " << tmp << ": " << err);
  };
  unsigned char prefix[8];
  uint64_t header_bytes = header.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(header_bytes >> (8 * i));
  if (std::fwrite(prefix, 1, 8, fp) != 8) fail_write("writing");
  if (std::fwrite(header.data(), 1, header.size(), fp) != header.size()) fail_write("writing");
  for (const auto& [name, t] : order) {
    if (t.bytes() == 0) continue;
    if (std::fwrite(t.raw_data(), 1, t.bytes(), fp) != t.bytes()) fail_write("writing");
  }
  if (std::fflush(fp) != 0) fail_write("flushing");
  maybe_slow_fsync_for_tests();
  if (fsync(fileno(fp)) != 0) fail_write("syncing");
  int rc = std::fclose(fp);
  fp = nullptr;
  if (rc != 0) fail_write("closing");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail_write("renaming over the final name");

  // The rename is durable only once the directory entry is on disk.
  const std::string dir = parent_dir(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  TANDEM_CHECK(dfd >= 0,
               path << ": saved, but cannot open directory " << dir << " to sync it: " << errno_text());
  int sync_rc = fsync(dfd);
  std::string sync_err = sync_rc != 0 ? errno_text() : std::string();
  ::close(dfd);
  TANDEM_CHECK(sync_rc == 0, path << ": saved, but syncing directory " << dir << " failed: " << sync_err);
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  File f;
  open_for_reading(f, path);
  return read_header(f.fp, path, file_size_of(f.fp, path));
}

namespace {

// The recorded checksum against the header and the data section as they lie in the file,
// in one pass, before any tensor is made; nothing to do for a file that records none.
void check_checksum(std::FILE* fp, const SafetensorsHeader& h, uint64_t file_bytes, const std::string& path) {
  if (!h.checksum) return;
  const std::string covered = checksummed_header(h.metadata, h.entries);
  uint32_t crc = crc32_update(0, covered.data(), covered.size());
  std::vector<unsigned char> chunk(std::min<uint64_t>(file_bytes - h.data_offset, 1u << 20));
  for (uint64_t at = h.data_offset; at < file_bytes; at += chunk.size()) {
    const size_t bytes = static_cast<size_t>(std::min<uint64_t>(chunk.size(), file_bytes - at));
    read_exact(fp, chunk.data(), bytes, at, path, "the data");
    crc = crc32_update(crc, chunk.data(), bytes);
  }
  TANDEM_CHECK(crc == *h.checksum, path << ": checksum mismatch: recorded " << checksum_text(*h.checksum)
                                        << ", computed " << checksum_text(crc)
                                        << " over the header and data; the file is corrupt");
}

}  // namespace

void verify_safetensors(const std::string& path) {
  File f;
  open_for_reading(f, path);
  const uint64_t file_bytes = file_size_of(f.fp, path);
  check_checksum(f.fp, read_header(f.fp, path, file_bytes), file_bytes, path);
}

SafetensorsFile load_safetensors(const std::string& path) {
  File f;
  open_for_reading(f, path);
  const uint64_t file_bytes = file_size_of(f.fp, path);
  SafetensorsHeader h = read_header(f.fp, path, file_bytes);
  // One pass over the data: each tensor is read into its own memory in file order and the
  // checksum taken over the bytes as they pass, the gaps between tensors included (the
  // header check refused overlaps).
  std::vector<std::pair<uint64_t, const std::string*>> in_file_order;
  for (const auto& [name, e] : h.entries) in_file_order.emplace_back(e.begin, &name);
  std::sort(in_file_order.begin(), in_file_order.end());
  uint32_t crc = 0;
  if (h.checksum) {
    const std::string covered = checksummed_header(h.metadata, h.entries);
    crc = crc32_update(0, covered.data(), covered.size());
  }
  std::vector<unsigned char> chunk;
  auto pass_over = [&](uint64_t from, uint64_t to) {  // bytes no tensor holds
    for (uint64_t at = from; at < to;) {
      chunk.resize(static_cast<size_t>(std::min<uint64_t>(to - at, 1u << 20)));
      read_exact(f.fp, chunk.data(), chunk.size(), at, path, "the data");
      if (h.checksum) crc = crc32_update(crc, chunk.data(), chunk.size());
      at += chunk.size();
    }
  };
  SafetensorsFile out;
  uint64_t at = h.data_offset;
  for (const auto& [begin, name] : in_file_order) {
    const SafetensorsEntry& e = h.entries.at(*name);
    pass_over(at, h.data_offset + begin);
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read_exact(f.fp, t.raw_data(), t.bytes(), h.data_offset + begin, path, "tensor \"" + *name + "\"");
    if (h.checksum) crc = crc32_update(crc, t.raw_data(), t.bytes());
    at = std::max(at, h.data_offset + begin + t.bytes());  // an empty tensor may sit where another starts
    out.tensors.emplace(*name, std::move(t));
  }
  pass_over(at, file_bytes);
  if (h.checksum) {
    TANDEM_CHECK(crc == *h.checksum, path << ": checksum mismatch: recorded " << checksum_text(*h.checksum)
                                          << ", computed " << checksum_text(crc)
                                          << " over the header and data; the file is corrupt");
  }
  out.metadata = std::move(h.metadata);
  return out;
}

std::string checkpoint_path(const std::string& dir, const std::string& prefix, int64_t iteration) {
  TANDEM_CHECK(iteration >= 0, "checkpoint_path: iteration must be non-negative, got " << iteration);
  char digits[32];
  std::snprintf(digits, sizeof digits, "%06lld", static_cast<long long>(iteration));
  std::string name = prefix + "-" + digits + ".safetensors";
  return dir.empty() ? name : (fs::path(dir) / name).string();
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir,
                                                              const std::string& prefix) {
  const std::string head = prefix + "-";
  const std::string tail = ".safetensors";
  std::vector<std::pair<int64_t, std::string>> candidates;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return candidates;
  for (const fs::directory_entry& entry : it) {
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    std::string name = entry.path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
      continue;
    }
    std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    candidates.emplace_back(std::stoll(digits), entry.path().string());
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return candidates;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir, const std::string& prefix) {
  const std::vector<std::pair<int64_t, std::string>> candidates = list_checkpoints(dir, prefix);
  for (const auto& [iteration, path] : candidates) {
    try {
      read_safetensors_header(path);
      return path;
    } catch (const Error&) {
      // torn or foreign: fall back to the next older one
    }
  }
  return std::nullopt;
}

std::vector<std::string> remove_stale_temporaries(const std::string& dir, const std::string& prefix,
                                                  std::chrono::seconds older_than) {
  std::vector<std::string> removed;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return removed;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& entry : it) {
    std::error_code entry_ec;
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0 || !is_unique_temporary_name(name)) continue;
    if (!entry.is_regular_file(entry_ec) || entry.is_symlink(entry_ec)) continue;
    const auto written = entry.last_write_time(entry_ec);
    if (entry_ec || now - written < older_than) continue;  // perhaps still being written
    if (fs::remove(entry.path(), entry_ec)) removed.push_back(entry.path().string());
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

}  // namespace tandem
