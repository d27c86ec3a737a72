#include "models/data/png_writer.h"

#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "models/data/dataset.h"
#include "runtime/error.h"
#include "runtime/file_write.h"

namespace tandem::data {

namespace {

constexpr int64_t kMaxSide = 1 << 15;

struct Rgb {
  uint8_t r, g, b;
};
constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kAxis{210, 210, 210};
constexpr Rgb kDot{25, 25, 40};
constexpr Rgb kMode{220, 20, 20};

uint8_t to_byte(float v) {
  if (std::isnan(v)) return 0;
  float scaled = std::clamp((v + 1.0f) * 127.5f, 0.0f, 255.0f);
  return static_cast<uint8_t>(std::lround(scaled));
}

// A CPU float32 copy (or the tensor itself when it already is one).
Tensor host_f32(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  return h.dtype() == DType::f32 ? h : h.to(DType::f32);
}

void write_grid(const std::string& path, const Tensor& images, int64_t columns, int64_t scale, int channels) {
  const char* what = channels == 1 ? "write_png_gray_grid" : "write_png_rgb_grid";
  check_defined(what, images, "images");
  TANDEM_CHECK(images.dim() == 4 && images.size(1) == channels, what << ": " << path
                                                                     << ": images must be [N, " << channels
                                                                     << ", H, W], got " << images.str());
  TANDEM_CHECK(images.size(0) > 0, what << ": " << path << ": no images to draw");
  TANDEM_CHECK(columns > 0, what << ": " << path << ": columns must be positive, got " << columns);
  TANDEM_CHECK(scale > 0, what << ": " << path << ": scale must be positive, got " << scale);
  const Tensor host = host_f32(images);
  const int64_t n = images.size(0), h = images.size(2), w = images.size(3);
  const int64_t cols = std::min(columns, n);
  const int64_t rows = (n + cols - 1) / cols;
  const int64_t tile_h = h * scale, tile_w = w * scale;
  const int64_t width = cols * tile_w + (cols + 1) * kGridBorder;
  const int64_t height = rows * tile_h + (rows + 1) * kGridBorder;
  TANDEM_CHECK(width <= kMaxSide && height <= kMaxSide,
               what << ": " << path << ": a " << width << "x" << height << " picture is too large");
  std::vector<uint8_t> pixels(static_cast<size_t>(width * height * channels), kGridBorderValue);
  const float* src = host.data<float>();
  for (int64_t k = 0; k < n; ++k) {
    const int64_t x0 = kGridBorder + (k % cols) * (tile_w + kGridBorder);
    const int64_t y0 = kGridBorder + (k / cols) * (tile_h + kGridBorder);
    for (int64_t y = 0; y < tile_h; ++y) {
      for (int64_t x = 0; x < tile_w; ++x) {
        for (int c = 0; c < channels; ++c) {
          float v = src[((k * channels + c) * h + y / scale) * w + x / scale];
          pixels[static_cast<size_t>(((y0 + y) * width + x0 + x) * channels + c)] = to_byte(v);
        }
      }
    }
  }
  write_png(path, width, height, channels, pixels);
}

class Canvas {
 public:
  explicit Canvas(int64_t size) : size_(size), pixels_(static_cast<size_t>(size * size * 3)) {
    for (int64_t i = 0; i < size * size; ++i) set_index(i, kWhite);
  }

  // Continuous pixel coordinates of a data point: x right, y up.
  double px(double x) const { return (x + kScatterRange) / (2 * kScatterRange) * static_cast<double>(size_); }
  double py(double y) const { return (kScatterRange - y) / (2 * kScatterRange) * static_cast<double>(size_); }
  double scale() const { return static_cast<double>(size_) / (2 * kScatterRange); }

  // Pixels whose centres lie at distance within [inner, outer] of (cx, cy).
  void ring(double cx, double cy, double inner, double outer, Rgb color) {
    const int64_t x_lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(cx - outer - 1)));
    const int64_t x_hi = std::min<int64_t>(size_ - 1, static_cast<int64_t>(std::ceil(cx + outer + 1)));
    const int64_t y_lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(cy - outer - 1)));
    const int64_t y_hi = std::min<int64_t>(size_ - 1, static_cast<int64_t>(std::ceil(cy + outer + 1)));
    for (int64_t y = y_lo; y <= y_hi; ++y) {
      for (int64_t x = x_lo; x <= x_hi; ++x) {
        double dx = static_cast<double>(x) + 0.5 - cx, dy = static_cast<double>(y) + 0.5 - cy;
        double d = std::sqrt(dx * dx + dy * dy);
        if (d >= inner && d <= outer) set(x, y, color);
      }
    }
  }

  void hline(int64_t y, Rgb color) {
    if (y < 0 || y >= size_) return;
    for (int64_t x = 0; x < size_; ++x) set(x, y, color);
  }
  void vline(int64_t x, Rgb color) {
    if (x < 0 || x >= size_) return;
    for (int64_t y = 0; y < size_; ++y) set(x, y, color);
  }

  const std::vector<uint8_t>& pixels() const { return pixels_; }

 private:
  void set(int64_t x, int64_t y, Rgb c) { set_index(y * size_ + x, c); }
  void set_index(int64_t i, Rgb c) {
    auto k = static_cast<size_t>(i * 3);
    pixels_[k] = c.r;
    pixels_[k + 1] = c.g;
    pixels_[k + 2] = c.b;
  }

  int64_t size_;
  std::vector<uint8_t> pixels_;
};

}  // namespace

void write_png(const std::string& path, int64_t width, int64_t height, int channels,
               const std::vector<uint8_t>& pixels) {
  TANDEM_CHECK(channels == 1 || channels == 3,
               "write_png: " << path << ": channels must be 1 or 3, got " << channels);
  TANDEM_CHECK(width > 0 && height > 0 && width <= kMaxSide && height <= kMaxSide,
               "write_png: " << path << ": bad size " << width << "x" << height);
  TANDEM_CHECK(pixels.size() == static_cast<size_t>(width * height * channels),
               "write_png: " << path << ": " << width << "x" << height << "x" << channels << " needs "
                             << width * height * channels << " bytes, got " << pixels.size());
  const std::string tmp = path + ".tmp";
  std::FILE* fp = fopen_fresh(tmp);
  TANDEM_CHECK(fp != nullptr,
               "cannot write PNG " << path << ": cannot create " << tmp << ": " << std::strerror(errno));

  // The simplified API reports libpng errors through the struct instead of longjmp,
  // which would skip C++ destructors.
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  int ok = png_image_write_to_stdio(&image, fp, 0, pixels.data(), static_cast<png_int_32>(width * channels),
                                    nullptr);
  std::string err = ok ? std::string() : std::string("libpng: ") + image.message;
  png_image_free(&image);
  if (ok && std::fflush(fp) != 0) {
    ok = 0;
    err = std::strerror(errno);
  }
  if (std::fclose(fp) != 0 && ok) {
    ok = 0;
    err = std::strerror(errno);
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = 0;
    err = std::string("renaming ") + tmp + ": " + std::strerror(errno);
  }
  if (!ok) {
    std::remove(tmp.c_str());
    TANDEM_FAIL("cannot write PNG " << path << ": " << err);
  }
}

void write_png_gray_grid(const std::string& path, const Tensor& images, int64_t columns, int64_t scale) {
  write_grid(path, images, columns, scale, 1);
}

void write_png_rgb_grid(const std::string& path, const Tensor& images, int64_t columns, int64_t scale) {
  write_grid(path, images, columns, scale, 3);
}

void write_ring8_scatter_png(const std::string& path, const Tensor& samples,
                             const std::vector<std::pair<double, double>>& modes, int64_t size) {
  check_defined("write_ring8_scatter_png", samples, "samples");
  TANDEM_CHECK(samples.dim() == 2 && samples.size(1) == 2,
               "write_ring8_scatter_png: " << path << ": samples must be [N, 2], got " << samples.str());
  TANDEM_CHECK(size >= 16 && size <= kMaxSide, "write_ring8_scatter_png: " << path << ": bad size " << size);
  const Tensor host = host_f32(samples);
  Canvas canvas(size);
  canvas.hline(static_cast<int64_t>(canvas.py(0.0)), kAxis);
  canvas.vline(static_cast<int64_t>(canvas.px(0.0)), kAxis);
  const float* p = host.data<float>();
  for (int64_t i = 0; i < samples.size(0); ++i) {
    double x = p[2 * i], y = p[2 * i + 1];
    if (!(std::abs(x) <= kScatterRange && std::abs(y) <= kScatterRange)) continue;  // also drops NaN
    canvas.ring(canvas.px(x), canvas.py(y), 0.0, 1.6, kDot);
  }
  const double radius = std::max(6.0, 3.0 * kRing8Sigma * canvas.scale());
  for (const auto& [mx, my] : modes)
    canvas.ring(canvas.px(mx), canvas.py(my), radius - 1.0, radius + 1.0, kMode);
  write_png(path, size, size, 3, canvas.pixels());
}

}  // namespace tandem::data
