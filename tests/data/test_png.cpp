#include <png.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "models/data/dataset.h"
#include "models/data/png_writer.h"
#include "tests/test_files.h"
using namespace tandem;
using namespace tandem::data;
namespace fs = std::filesystem;
using namespace tandem::testing;

namespace {

// Decoded independently of the writer, with libpng's reading API, as 8-bit RGB.
struct Decoded {
  uint32_t width = 0, height = 0;
  bool color = false;
  std::vector<uint8_t> rgb;
  const uint8_t* at(uint32_t x, uint32_t y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

Decoded read_png(const std::string& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  REQUIRE(png_image_begin_read_from_file(&image, path.c_str()) != 0);
  Decoded d;
  d.width = image.width;
  d.height = image.height;
  d.color = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  image.format = PNG_FORMAT_RGB;
  d.rgb.resize(PNG_IMAGE_SIZE(image));
  REQUIRE(png_image_finish_read(&image, nullptr, d.rgb.data(), 0, nullptr) != 0);
  return d;
}

bool is_red(const uint8_t* p) { return p[0] > 180 && p[1] < 80 && p[2] < 80; }
bool is_dark(const uint8_t* p) { return p[0] < 80 && p[1] < 80 && p[2] < 80; }
bool is_white(const uint8_t* p) { return p[0] == 255 && p[1] == 255 && p[2] == 255; }

}  // namespace

TEST_CASE("gray grid: layout, borders and the [-1, 1] to byte mapping", "[png]") {
  TempDir dir;
  const std::string path = dir.file("grid.png");
  // 5 images of 4x3, image k filled with value -1 + 0.5 k: bytes 0, 64, 128, 191, 255.
  std::vector<double> v;
  for (int k = 0; k < 5; ++k) v.insert(v.end(), 12, -1.0 + 0.5 * k);
  v[12 * 2 + 1 * 3 + 2] = std::numeric_limits<double>::quiet_NaN();  // image 2, row 1, col 2
  v[12 * 3] = 7.0;                                                   // clamps to 255
  write_png_gray_grid(path, Tensor::from_values({5, 1, 4, 3}, v), 2);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  Decoded d = read_png(path);
  CHECK_FALSE(d.color);
  CHECK(d.width == 2 * 3 + 3 * kGridBorder);   // 2 columns
  CHECK(d.height == 3 * 4 + 4 * kGridBorder);  // 3 rows
  auto tile = [&](int k, uint32_t x, uint32_t y) {
    uint32_t x0 = kGridBorder + (k % 2) * (3 + kGridBorder), y0 = kGridBorder + (k / 2) * (4 + kGridBorder);
    return d.at(x0 + x, y0 + y)[0];
  };
  CHECK(d.at(0, 0)[0] == kGridBorderValue);
  CHECK(tile(0, 0, 0) == 0);
  CHECK(tile(1, 2, 3) == 64);
  CHECK(tile(2, 0, 0) == 128);
  CHECK(tile(2, 2, 1) == 0);  // NaN
  CHECK(tile(3, 1, 1) == 191);
  CHECK(tile(3, 0, 0) == 255);
  CHECK(tile(4, 2, 3) == 255);
  CHECK(tile(5, 1, 1) == kGridBorderValue);  // the empty sixth cell

  // Scaled, f64 input, fewer images than columns.
  write_png_gray_grid(path, Tensor::from_values({1, 1, 1, 2}, {-1, 1}, DType::f64), 8, 3);
  d = read_png(path);
  CHECK(d.width == 6 + 2 * kGridBorder);
  CHECK(d.height == 3 + 2 * kGridBorder);
  CHECK(d.at(kGridBorder + 2, kGridBorder + 2)[0] == 0);
  CHECK(d.at(kGridBorder + 3, kGridBorder)[0] == 255);
}

TEST_CASE("rgb grid keeps the channels apart", "[png]") {
  TempDir dir;
  const std::string path = dir.file("rgb.png");
  // 2 images of 2x2: image 0 pure red, image 1 pure blue with one green pixel.
  std::vector<double> v(2 * 3 * 4, -1.0);
  for (int i = 0; i < 4; ++i) v[0 * 12 + 0 * 4 + i] = 1.0;
  for (int i = 0; i < 4; ++i) v[1 * 12 + 2 * 4 + i] = 1.0;
  v[1 * 12 + 1 * 4 + 3] = 1.0;
  write_png_rgb_grid(path, Tensor::from_values({2, 3, 2, 2}, v), 4);
  Decoded d = read_png(path);
  CHECK(d.color);
  CHECK(d.width == 2 * 2 + 3 * kGridBorder);
  CHECK(d.height == 2 + 2 * kGridBorder);
  const uint8_t* red = d.at(kGridBorder, kGridBorder);
  CHECK((red[0] == 255 && red[1] == 0 && red[2] == 0));
  const uint32_t x1 = 2 * kGridBorder + 2;
  const uint8_t* blue = d.at(x1, kGridBorder);
  CHECK((blue[0] == 0 && blue[1] == 0 && blue[2] == 255));
  const uint8_t* cyan = d.at(x1 + 1, kGridBorder + 1);
  CHECK((cyan[0] == 0 && cyan[1] == 255 && cyan[2] == 255));
  CHECK_THROWS_WITH(write_png_rgb_grid(path, Tensor::zeros({2, 1, 2, 2}), 4),
                    Catch::Contains("images must be [N, 3, H, W], got float32[2, 1, 2, 2]"));
}

TEST_CASE("ring8 scatter: white background, dark samples, red mode circles", "[png]") {
  TempDir dir;
  const std::string path = dir.file("ring8.png");
  // One sample at (0.5, 0.5), one off-canvas, one NaN; no sample near any mode.
  Tensor samples = Tensor::from_values({3, 2}, {0.5, 0.5, 5.0, -7.0, std::nan(""), 0.0});
  write_ring8_scatter_png(path, samples, ring8_modes());
  Decoded d = read_png(path);
  CHECK(d.color);
  CHECK(d.width == 512);
  CHECK(d.height == 512);
  CHECK(is_white(d.at(0, 0)));
  CHECK(is_white(d.at(511, 511)));
  CHECK(is_dark(d.at(298, 213)));  // (0.5, 0.5): x = 3.5/6*512, y = 2.5/6*512
  CHECK(is_white(d.at(310, 213)));
  // Mode (0, 2): centre (256, 85.3); its circle is red, its centre is not.
  CHECK_FALSE(is_red(d.at(256, 85)));
  int red = 0;
  for (uint32_t y = 70; y < 100; ++y) {
    for (uint32_t x = 240; x < 272; ++x) red += is_red(d.at(x, y)) ? 1 : 0;
  }
  CHECK(red > 20);
  // Every mode has its circle: count red pixels around each.
  for (const auto& [mx, my] : ring8_modes()) {
    auto cx = static_cast<uint32_t>((mx + 3) / 6 * 512), cy = static_cast<uint32_t>((3 - my) / 6 * 512);
    int n = 0;
    for (uint32_t y = cy - 10; y < cy + 10; ++y) {
      for (uint32_t x = cx - 10; x < cx + 10; ++x) n += is_red(d.at(x, y)) ? 1 : 0;
    }
    CHECK(n > 20);
  }
  // Samples on the modes darken the inside of the circles.
  Generator gen(1);
  write_ring8_scatter_png(path, make_ring8(2000, gen), ring8_modes(), 256);
  d = read_png(path);
  CHECK(d.width == 256);
  CHECK(is_dark(d.at(213, 128)));  // mode (2, 0) at x = 5/6*256
}

TEST_CASE("png writes are atomic and errors name the path", "[png][errors]") {
  TempDir dir;
  const std::string missing = dir.file("no/such/dir/grid.png");
  CHECK_THROWS_WITH(write_png_gray_grid(missing, Tensor::zeros({1, 1, 2, 2}), 1),
                    Catch::Contains("cannot write PNG " + missing + ": cannot create " + missing + ".tmp"));
  CHECK_THROWS_WITH(write_ring8_scatter_png(missing, Tensor::zeros({1, 2}), ring8_modes()),
                    Catch::Contains("cannot write PNG " + missing));

  // The final name is taken by a directory: the rename fails, and no .tmp is left behind.
  const std::string blocked = dir.file("blocked.png");
  fs::create_directory(blocked);
  fs::create_directory(blocked + "/keep");
  CHECK_THROWS_WITH(write_png_gray_grid(blocked, Tensor::zeros({1, 1, 2, 2}), 1),
                    Catch::Contains("cannot write PNG " + blocked + ": renaming " + blocked + ".tmp"));
  CHECK_FALSE(fs::exists(blocked + ".tmp"));

  // Overwriting an existing picture replaces it whole.
  const std::string path = dir.file("grid.png");
  write_png_gray_grid(path, Tensor::zeros({4, 1, 5, 5}), 2);
  write_png_gray_grid(path, Tensor::zeros({1, 1, 5, 5}), 2);
  CHECK(read_png(path).width == 5 + 2 * kGridBorder);
  CHECK_FALSE(fs::exists(path + ".tmp"));

  CHECK_THROWS_WITH(write_png_gray_grid(path, Tensor::zeros({0, 1, 5, 5}), 2), Catch::Contains("no images"));
  CHECK_THROWS_WITH(write_png_gray_grid(path, Tensor::zeros({1, 1, 5, 5}), 0),
                    Catch::Contains("columns must be positive"));
  CHECK_THROWS_WITH(write_png(path, 2, 2, 1, {1, 2, 3}), Catch::Contains("needs 4 bytes, got 3"));
}
