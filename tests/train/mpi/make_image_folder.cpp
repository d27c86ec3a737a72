// Writes pictures made from an IDX image file (Fashion-MNIST) into a folder tree, for the
// image-folder training test (images_test.sh):
//   make_image_folder <images.idx[.gz]> <out dir> <count> gray|rgb
// Image i goes to <out>/<i % 3>/img-<i>: even i as a 28x28 PNG, odd i as a JPEG at quality 95
// enlarged to 56x64 (each pixel 2x2, 4 blank rows above and below), so that loading crops
// and averages it back. rgb tints each picture (red = v, green = 255 - v, blue = v / 2).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/png_writer.h"
#include "tests/jpeg_writer.h"

namespace {

void write_jpeg(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels) {
  tandem::testing::write_jpeg(path, width, height, channels, pixels, 95, /*full_chroma=*/false);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: make_image_folder <images.idx[.gz]> <out dir> <count> gray|rgb\n";
    return 2;
  }
  try {
    const tandem::data::IdxArray idx = tandem::data::read_idx_u8(argv[1]);
    const std::string out = argv[2];
    const int64_t count = std::stoll(argv[3]);
    const int channels = std::string(argv[4]) == "rgb" ? 3 : 1;
    if (idx.dims.size() != 3 || idx.dims[0] < count)
      throw std::runtime_error("too few images in the IDX file");
    const int64_t h = idx.dims[1], w = idx.dims[2];
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t* src = &idx.data[static_cast<size_t>(i * h * w)];
      auto pixel = [&](int64_t x, int64_t y, uint8_t* dst) {
        const uint8_t v = src[y * w + x];
        if (channels == 1) {
          dst[0] = v;
        } else {
          dst[0] = v;
          dst[1] = static_cast<uint8_t>(255 - v);
          dst[2] = static_cast<uint8_t>(v / 2);
        }
      };
      const std::string dir = out + "/" + std::to_string(i % 3);
      std::filesystem::create_directories(dir);
      const std::string stem = dir + "/img-" + std::to_string(i);
      if (i % 2 == 0) {
        std::vector<uint8_t> pixels(static_cast<size_t>(h * w * channels));
        for (int64_t y = 0; y < h; ++y)
          for (int64_t x = 0; x < w; ++x) pixel(x, y, &pixels[static_cast<size_t>((y * w + x) * channels)]);
        tandem::data::write_png(stem + ".png", w, h, channels, pixels);
      } else {
        const int64_t big_w = 2 * w, big_h = 2 * h + 8;
        std::vector<uint8_t> pixels(static_cast<size_t>(big_w * big_h * channels), 0);
        for (int64_t y = 0; y < 2 * h; ++y)
          for (int64_t x = 0; x < big_w; ++x)
            pixel(x / 2, y / 2, &pixels[static_cast<size_t>(((y + 4) * big_w + x) * channels)]);
        write_jpeg(stem + ".jpg", static_cast<int>(big_w), static_cast<int>(big_h), channels, pixels);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "make_image_folder: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
