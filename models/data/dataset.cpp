#include "models/data/dataset.h"

#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numbers>

#include "runtime/error.h"

namespace tandem::data {

namespace {

namespace fs = std::filesystem;

// IDX type code 0x08: unsigned bytes. The magic is 0x00 0x00 <type> <ndims>.
constexpr uint32_t kIdxUnsignedByte = 0x08;
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 34;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Closes on scope exit so every early throw releases the handle.
struct GzFile {
  gzFile fp = nullptr;
  GzFile() = default;
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  ~GzFile() {
    if (fp != nullptr) gzclose(fp);
  }
};

std::string gz_error(gzFile fp, const std::string& path) {
  int code = 0;
  const char* msg = gzerror(fp, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  std::string text = msg != nullptr ? msg : "unknown zlib error";
  // zlib prefixes the path it was opened with; ours already leads the message.
  if (text.compare(0, path.size() + 2, path + ": ") == 0) text.erase(0, path.size() + 2);
  return text;
}

// Reads up to `bytes`; returns how many arrived (fewer at end of file). Throws on a zlib
// error (corrupt deflate data or a truncated stream), naming the file.
uint64_t gz_read_some(gzFile fp, uint8_t* dst, uint64_t bytes, const std::string& path, const char* what) {
  uint64_t done = 0;
  while (done < bytes) {
    unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(bytes - done, 1u << 24));
    int got = gzread(fp, dst + done, chunk);
    if (got < 0) {
      TANDEM_FAIL(path << ": corrupt or truncated: reading " << what << " after " << done << " of " << bytes
                       << " bytes: " << gz_error(fp, path));
    }
    if (got == 0) break;
    done += static_cast<uint64_t>(got);
  }
  return done;
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

IdxArray read_idx_checked(const std::string& path, int expected_ndims) {
  GzFile f;
  f.fp = gzopen(path.c_str(), "rb");
  TANDEM_CHECK(f.fp != nullptr, path << ": cannot open IDX file: " << std::strerror(errno));
  gzbuffer(f.fp, 1u << 17);

  uint8_t magic_bytes[4];
  uint64_t got = gz_read_some(f.fp, magic_bytes, 4, path, "the magic number");
  TANDEM_CHECK(got == 4,
               path << ": truncated: " << got << " bytes, too short for the 4-byte IDX magic number");
  uint32_t magic = big_endian_u32(magic_bytes);
  uint32_t ndims = magic & 0xff;
  if (expected_ndims >= 0) {
    uint32_t want = (kIdxUnsignedByte << 8) | static_cast<uint32_t>(expected_ndims);
    TANDEM_CHECK(magic == want, path << ": bad magic " << hex32(magic) << ", expected " << hex32(want)
                                     << " (IDX of unsigned bytes with " << expected_ndims << " dimensions)");
  } else {
    TANDEM_CHECK((magic >> 8) == kIdxUnsignedByte && ndims >= 1,
                 path << ": bad magic " << hex32(magic) << ", expected 0x000008NN (IDX of unsigned bytes)");
  }

  IdxArray out;
  std::vector<uint8_t> dim_bytes(4 * ndims);
  got = gz_read_some(f.fp, dim_bytes.data(), dim_bytes.size(), path, "the dimensions");
  TANDEM_CHECK(got == dim_bytes.size(), path << ": truncated: the header announces " << ndims
                                             << " dimensions but the file ends inside them");
  uint64_t total = 1;
  for (uint32_t i = 0; i < ndims; ++i) {
    uint32_t d = big_endian_u32(&dim_bytes[4 * i]);
    out.dims.push_back(d);
    TANDEM_CHECK(d == 0 || total <= kMaxIdxBytes / d, path << ": corrupt header: dimensions "
                                                           << shape_str(out.dims)
                                                           << "... are implausibly large");
    total *= d;
  }

  out.data.resize(total);
  got = gz_read_some(f.fp, out.data.data(), total, path, "the data");
  TANDEM_CHECK(got == total, path << ": truncated: dimensions " << shape_str(out.dims) << " need " << total
                                  << " bytes of data after the header, the file has " << got);
  // Reading past the end also makes zlib check the gzip trailer (CRC and length).
  uint8_t extra = 0;
  got = gz_read_some(f.fp, &extra, 1, path, "past the data");
  TANDEM_CHECK(got == 0, path << ": corrupt: unexpected data after the " << total << " bytes that dimensions "
                              << shape_str(out.dims) << " describe");
  return out;
}

std::string fashion_mnist_file(const std::string& dir, bool train, const char* kind) {
  std::string name = std::string(train ? "train" : "t10k") + "-" + kind + "-ubyte.gz";
  return (fs::path(dir) / name).string();
}

void require_dataset_file(const std::string& path) {
  std::error_code ec;
  TANDEM_CHECK(fs::exists(path, ec),
               "Fashion-MNIST file " << path
                                     << " not found: install the Debian package dataset-fashion-mnist "
                                     << "(scripts/setup.sh does) or pass --data-dir DIR naming a directory "
                                     << "that holds {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz");
}

}  // namespace

std::vector<std::pair<double, double>> ring8_modes() {
  std::vector<std::pair<double, double>> modes;
  for (int k = 0; k < kRing8Modes; ++k) {
    double angle = 2.0 * std::numbers::pi * k / kRing8Modes;
    modes.emplace_back(kRing8Radius * std::cos(angle), kRing8Radius * std::sin(angle));
  }
  return modes;
}

Tensor make_ring8(int64_t count, Generator& gen) { return make_ring8_labeled(count, gen).points; }

Ring8Draw make_ring8_labeled(int64_t count, Generator& gen) {
  TANDEM_CHECK(count >= 0, "make_ring8: count must be non-negative, got " << count);
  const auto modes = ring8_modes();
  Ring8Draw out{Tensor::empty({count, 2}), Tensor::empty({count}, DType::i64)};
  fill_normal(out.points, 0.0, kRing8Sigma, gen);
  float* p = out.points.data<float>();
  int64_t* label = out.labels.data<int64_t>();
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t k = gen.below(kRing8Modes);
    const auto& m = modes[k];
    p[2 * i] += static_cast<float>(m.first);
    p[2 * i + 1] += static_cast<float>(m.second);
    label[i] = static_cast<int64_t>(k);
  }
  return out;
}

Ring8Quality ring8_quality(const Tensor& samples) {
  check_defined("ring8_quality", samples, "samples");
  TANDEM_CHECK(samples.dim() == 2 && samples.size(1) == 2,
               "ring8_quality: samples must be [N, 2], got " << samples.str());
  TANDEM_CHECK(samples.device().is_cpu(), "ring8_quality: samples must be on the CPU, got " << samples.str());
  const std::vector<double> v = samples.to_vector();
  const auto modes = ring8_modes();
  const double limit_sq = (3.0 * kRing8Sigma) * (3.0 * kRing8Sigma);
  Ring8Quality q;
  q.count = samples.size(0);
  q.per_mode_counts.assign(kRing8Modes, 0);
  int64_t good = 0;
  for (int64_t i = 0; i < q.count; ++i) {
    double x = v[static_cast<size_t>(2 * i)], y = v[static_cast<size_t>(2 * i + 1)];
    for (int k = 0; k < kRing8Modes; ++k) {
      double dx = x - modes[static_cast<size_t>(k)].first, dy = y - modes[static_cast<size_t>(k)].second;
      if (dx * dx + dy * dy <= limit_sq) {
        ++q.per_mode_counts[static_cast<size_t>(k)];
        ++good;
        break;  // modes are 1.5 apart: a point is within 3 sigma of at most one
      }
    }
  }
  for (int64_t c : q.per_mode_counts) {
    if (q.count > 0 && static_cast<double>(c) >= 0.01 * static_cast<double>(q.count)) ++q.modes_covered;
  }
  q.high_quality_fraction = q.count > 0 ? static_cast<double>(good) / static_cast<double>(q.count) : 0.0;
  return q;
}

Tensor ImageDataset::label_tensor(const std::vector<int64_t>& indices) const {
  TANDEM_CHECK(static_cast<int64_t>(labels.size()) == size(),
               "dataset labels: " << labels.size() << " labels for " << size() << " images");
  Tensor out = Tensor::empty({static_cast<int64_t>(indices.size())}, DType::i64);
  int64_t* dst = out.data<int64_t>();
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t r = indices[k];
    TANDEM_CHECK(r >= 0 && r < size(),
                 "dataset labels: index " << r << " (position " << k << ") is outside [0, " << size() << ")");
    dst[k] = labels[static_cast<size_t>(r)];
  }
  return out;
}

IdxArray read_idx_u8(const std::string& path) { return read_idx_checked(path, -1); }

void write_idx_u8(const std::string& path, const IdxArray& array) {
  TANDEM_CHECK(!array.dims.empty() && array.dims.size() <= 255,
               path << ": cannot write IDX: needs 1 to 255 dimensions, got " << array.dims.size());
  uint64_t total = 1;
  std::vector<uint8_t> header;
  uint32_t magic = (kIdxUnsignedByte << 8) | static_cast<uint32_t>(array.dims.size());
  auto put32 = [&header](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) header.push_back(static_cast<uint8_t>(v >> s));
  };
  put32(magic);
  for (int64_t d : array.dims) {
    TANDEM_CHECK(d >= 0 && d <= std::numeric_limits<uint32_t>::max(),
                 path << ": cannot write IDX: dimension " << d << " does not fit in 32 bits");
    put32(static_cast<uint32_t>(d));
    total *= static_cast<uint64_t>(d);
  }
  TANDEM_CHECK(total == array.data.size(), path << ": cannot write IDX: dimensions " << shape_str(array.dims)
                                                << " need " << total << " bytes, got " << array.data.size());
  gzFile fp = gzopen(path.c_str(), "wb");
  TANDEM_CHECK(fp != nullptr, path << ": cannot create IDX file: " << std::strerror(errno));
  bool ok =
      gzwrite(fp, header.data(), static_cast<unsigned>(header.size())) == static_cast<int>(header.size());
  for (uint64_t done = 0; ok && done < total;) {
    unsigned chunk = static_cast<unsigned>(std::min<uint64_t>(total - done, 1u << 24));
    ok = gzwrite(fp, array.data.data() + done, chunk) == static_cast<int>(chunk);
    done += chunk;
  }
  std::string err = ok ? std::string() : gz_error(fp, path);
  int close_rc = gzclose(fp);
  TANDEM_CHECK(ok, path << ": cannot write IDX file: " << err);
  TANDEM_CHECK(close_rc == Z_OK,
               path << ": cannot write IDX file: closing failed (zlib error " << close_rc << ")");
}

ImageDataset load_idx_images(const std::string& images_path, const std::string& labels_path) {
  IdxArray images = read_idx_checked(images_path, 3);
  IdxArray labels = read_idx_checked(labels_path, 1);
  TANDEM_CHECK(images.dims[0] == labels.dims[0], images_path << ": dimension mismatch: " << images.dims[0]
                                                             << " images but " << labels_path << " has "
                                                             << labels.dims[0] << " labels");
  ImageDataset ds;
  const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  ds.images = Tensor::empty({n, 1, h, w});
  float* dst = ds.images.data<float>();
  for (size_t i = 0; i < images.data.size(); ++i) dst[i] = static_cast<float>(images.data[i]) / 127.5f - 1.0f;
  ds.labels.assign(labels.data.begin(), labels.data.end());
  return ds;
}

ImageDataset load_fashion_mnist(const std::string& dir, bool train) {
  const std::string images_path = fashion_mnist_file(dir, train, "images-idx3");
  const std::string labels_path = fashion_mnist_file(dir, train, "labels-idx1");
  require_dataset_file(images_path);
  require_dataset_file(labels_path);
  ImageDataset ds = load_idx_images(images_path, labels_path);
  TANDEM_CHECK(ds.images.size(2) == 28 && ds.images.size(3) == 28,
               images_path << ": dimension mismatch: Fashion-MNIST images are 28x28, the file holds "
                           << ds.images.size(2) << "x" << ds.images.size(3));
  for (size_t i = 0; i < ds.labels.size(); ++i) {
    TANDEM_CHECK(ds.labels[i] < 10, labels_path << ": corrupt: label " << ds.labels[i] << " at index " << i
                                                << " is outside 0..9");
  }
  return ds;
}

}  // namespace tandem::data
