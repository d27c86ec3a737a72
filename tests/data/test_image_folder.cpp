// Image folders: the PNG and JPEG decoders, channel conversion, centre crop and area
// average, the folder's order, and the named errors for bad files (with and without
// skipping them). The pictures are written here with libpng (png_writer) and libjpeg.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "models/data/image_decode.h"
#include "models/data/image_folder.h"
#include "models/data/image_resize.h"
#include "models/data/png_writer.h"
#include "tests/jpeg_writer.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::data;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

// A baseline JPEG at quality 100 with no chroma subsampling: flat colours survive within a
// unit or two.
void write_jpeg(const std::string& path, int width, int height, int channels,
                const std::vector<uint8_t>& pixels) {
  tandem::testing::write_jpeg(path, width, height, channels, pixels, 100, /*full_chroma=*/true);
}

std::vector<uint8_t> flat(int width, int height, std::vector<uint8_t> colour) {
  std::vector<uint8_t> out;
  for (int i = 0; i < width * height; ++i) out.insert(out.end(), colour.begin(), colour.end());
  return out;
}

DecodedImage gray(int64_t width, int64_t height, std::vector<uint8_t> pixels) {
  return DecodedImage{.width = width, .height = height, .channels = 1, .pixels = std::move(pixels)};
}

// The message of the Error `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

void truncate_file(const std::string& path, double keep) {
  const std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, static_cast<size_t>(static_cast<double>(bytes.size()) * keep)));
}

}  // namespace

TEST_CASE("PNG decodes to its own channels byte for byte", "[image]") {
  TempDir dir("image");
  const std::vector<uint8_t> rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 0, 0, 0, 255, 255, 255};
  write_png(dir.file("rgb.png"), 3, 2, 3, rgb);
  DecodedImage d = decode_image(dir.file("rgb.png"));
  CHECK(d.width == 3);
  CHECK(d.height == 2);
  CHECK(d.channels == 3);
  CHECK(d.pixels == rgb);

  const std::vector<uint8_t> g = {0, 1, 127, 128, 254, 255};
  write_png(dir.file("gray.png"), 2, 3, 1, g);
  d = decode_image(dir.file("gray.png"));
  CHECK(d.width == 2);
  CHECK(d.height == 3);
  CHECK(d.channels == 1);
  CHECK(d.pixels == g);
}

TEST_CASE("JPEG decodes flat colours within the rounding of JPEG", "[image]") {
  TempDir dir("image");
  write_jpeg(dir.file("rgb.jpg"), 16, 8, 3, flat(16, 8, {200, 100, 50}));
  DecodedImage d = decode_image(dir.file("rgb.jpg"));
  REQUIRE(d.channels == 3);
  CHECK(d.width == 16);
  CHECK(d.height == 8);
  for (int64_t y = 0; y < 8; ++y) {
    for (int64_t x = 0; x < 16; ++x) {
      CHECK(std::abs(d.at(x, y)[0] - 200) <= 2);
      CHECK(std::abs(d.at(x, y)[1] - 100) <= 2);
      CHECK(std::abs(d.at(x, y)[2] - 50) <= 2);
    }
  }
  write_jpeg(dir.file("gray.jpeg"), 8, 8, 1, flat(8, 8, {77}));
  d = decode_image(dir.file("gray.jpeg"));
  REQUIRE(d.channels == 1);
  for (uint8_t v : d.pixels) CHECK(std::abs(v - 77) <= 1);
}

TEST_CASE("channel conversion: gray repeats and RGB to gray is BT.601", "[image]") {
  DecodedImage rgb{.width = 3, .height = 1, .channels = 3, .pixels = {255, 0, 0, 10, 20, 30, 255, 255, 255}};
  CHECK(to_channels(rgb, 1).pixels == std::vector<uint8_t>{76, 18, 255});  // 76.245, 18.15, 255
  CHECK(to_channels(gray(2, 1, {9, 200}), 3).pixels == std::vector<uint8_t>{9, 9, 9, 200, 200, 200});
  CHECK(to_channels(rgb, 3).pixels == rgb.pixels);
}

TEST_CASE("square_resize: centre crop then the area average", "[image]") {
  // 6x4: the centred 4x4 square starts at column 1; 2x2 blocks average exactly.
  std::vector<uint8_t> p(24);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x)
      p[static_cast<size_t>(y * 6 + x)] = static_cast<uint8_t>(x == 0 || x == 5 ? 250 : 10 * y + x);
  std::vector<float> out = square_resize(gray(6, 4, p), 2);
  // Block (0,0): rows 0-1, columns 1-2 -> (1 + 2 + 11 + 12) / 4.
  CHECK(out == std::vector<float>{6.5f, 8.5f, 26.5f, 28.5f});

  // 3x3 to 2x2: each output pixel covers 1.5 source pixels per axis, weights 2/3 and 1/3.
  out = square_resize(gray(3, 3, {0, 90, 180, 9, 99, 189, 18, 108, 198}), 2);
  const double w[2] = {2.0 / 3.0, 1.0 / 3.0};
  auto src = [](int x, int y) { return 90.0 * x + 9.0 * y; };
  double expect00 = 0, expect11 = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      expect00 += w[a] * w[b] * src(b, a);
      expect11 += w[a] * w[b] * src(2 - b, 2 - a);
    }
  CHECK(out[0] == Approx(expect00).epsilon(1e-6));
  CHECK(out[3] == Approx(expect11).epsilon(1e-6));

  // Enlarging 2x2 to 4x4 repeats each pixel (nearest); to 3x3 the middle blends halves.
  out = square_resize(gray(2, 2, {0, 100, 200, 40}), 4);
  CHECK(out == std::vector<float>{0, 0, 100, 100, 0, 0, 100, 100, 200, 200, 40, 40, 200, 200, 40, 40});
  out = square_resize(gray(2, 2, {0, 100, 200, 40}), 3);
  CHECK(out[1] == Approx(50.0));
  CHECK(out[4] == Approx(85.0));  // (0 + 100 + 200 + 40) / 4
  CHECK(out[8] == Approx(40.0));

  // RGB comes out planar: [3, side, side].
  DecodedImage rgb{.width = 2, .height = 2, .channels = 3, .pixels = flat(2, 2, {10, 20, 30})};
  CHECK(square_resize(rgb, 1) == std::vector<float>{10, 20, 30});
}

TEST_CASE("resize_images: square_resize's rule on a batch of float pictures", "[image]") {
  // Two 1-channel 2x2 pictures and one 3-channel picture, each enlarged as square_resize
  // enlarges the same pixels.
  Tensor gray2 = Tensor::from_values({2, 1, 2, 2}, {0, 100, 200, 40, 1, 2, 3, 4});
  Tensor out = resize_images(gray2, 3);
  REQUIRE(out.shape() == Shape{2, 1, 3, 3});
  std::vector<float> first = square_resize(gray(2, 2, {0, 100, 200, 40}), 3);
  std::vector<float> second = square_resize(gray(2, 2, {1, 2, 3, 4}), 3);
  std::vector<double> got = out.to_vector();
  for (size_t i = 0; i < 9; ++i) {
    CHECK(got[i] == first[i]);
    CHECK(got[9 + i] == second[i]);
  }
  // 28x28 Fashion-MNIST values in [-1, 1] to 64x64: a flat picture stays flat, in range.
  Tensor flat28 = Tensor::full({1, 1, 28, 28}, -0.5);
  for (double v : resize_images(flat28, 64).to_vector()) CHECK(v == Approx(-0.5).epsilon(1e-6));
  Tensor planar = Tensor::from_values({1, 3, 1, 1}, {10, 20, 30});
  CHECK(resize_images(planar, 2).to_vector() ==
        std::vector<double>{10, 10, 10, 10, 20, 20, 20, 20, 30, 30, 30, 30});
  CHECK_THROWS_WITH(resize_images(Tensor::zeros({1, 1, 2, 3}), 4),
                    Catch::Contains("resize_images: needs square float32 pictures [N, C, S, S]"));
}

TEST_CASE("an image folder: every file sorted and recursive and scaled to -1..1", "[image]") {
  TempDir dir("image_folder");
  fs::create_directories(dir.path / "b" / "c");
  fs::create_directories(dir.path / ".hidden");
  write_png(dir.file("b/c/z.png"), 2, 2, 1, {255, 255, 255, 255});  // 1 after scaling
  write_png(dir.file("a.png"), 4, 2, 3, flat(4, 2, {255, 0, 0}));   // gray 76 -> 76 / 127.5 - 1
  write_jpeg(dir.file("b/m.jpg"), 8, 8, 1, flat(8, 8, {0}));
  write_bytes(dir.file(".hidden/notes.txt"), "not a picture");
  write_bytes(dir.file(".DS_Store"), "not a picture either");

  CHECK(list_image_files(dir.path.string()) ==
        std::vector<std::string>{dir.file("a.png"), dir.file("b/c/z.png"), dir.file("b/m.jpg")});
  ImageFolder gray_folder = load_image_folder(dir.path.string(), {.channels = 1, .side = 2});
  REQUIRE(gray_folder.dataset.images.shape() == Shape{3, 1, 2, 2});
  std::vector<double> v = gray_folder.dataset.images.to_vector();
  CHECK(v[0] == Approx(76 / 127.5 - 1).epsilon(1e-6));
  CHECK(v[4] == Approx(1.0));
  CHECK(std::abs(v[8] + 1.0) <= 1.0 / 127.5);  // JPEG's black
  CHECK(gray_folder.dataset.labels == std::vector<int64_t>{0, 0, 0});
  CHECK(gray_folder.skipped.empty());

  int64_t calls = 0, last_total = 0;
  ImageFolder rgb = load_image_folder(
      dir.path.string(), {.channels = 3, .side = 3, .progress = [&](int64_t done, int64_t total) {
                            CHECK(done == ++calls);
                            last_total = total;
                          }});
  CHECK(calls == 3);
  CHECK(last_total == 3);
  REQUIRE(rgb.dataset.images.shape() == Shape{3, 3, 3, 3});
  v = rgb.dataset.images.to_vector();
  CHECK(v[0] == Approx(1.0));   // red plane of a.png
  CHECK(v[9] == Approx(-1.0));  // its green plane
  CHECK(v[27] == Approx(1.0));  // z.png, white in every plane
  CHECK(v[27 + 18] == Approx(1.0));
}

TEST_CASE("image folder errors name the folder or file and the reason (and --skip-bad-images counts them)",
          "[image]") {
  TempDir dir("image_errors");
  const std::string root = dir.path.string();
  fs::create_directories(dir.path / "empty" / "sub");
  std::string msg = error_of([&] { load_image_folder(root + "/empty", {}); });
  CHECK_THAT(msg, Catch::Contains(root + "/empty") && Catch::Contains("no PNG or JPEG image"));
  msg = error_of([&] { load_image_folder(root + "/missing", {}); });
  CHECK_THAT(msg, Catch::Contains(root + "/missing") && Catch::Contains("no such folder"));

  const std::string good = root + "/good";
  fs::create_directories(good);
  for (int i = 0; i < 3; ++i) write_png(good + "/" + std::to_string(i) + ".png", 4, 4, 1, flat(4, 4, {100}));
  write_jpeg(good + "/3.jpg", 16, 16, 3, flat(16, 16, {1, 2, 3}));
  CHECK(load_image_folder(good, {}).dataset.size() == 4);

  struct Bad {
    const char* name;
    std::function<void(const std::string&)> make;
    const char* reason;
  };
  const std::vector<Bad> bads = {
      {"text.png", [](const std::string& p) { write_bytes(p, "hello, not a picture"); },
       "not a PNG or JPEG image (it starts with bytes 68 65 6c 6c 6f 2c 20 6e)"},
      {"empty.jpg", [](const std::string& p) { write_bytes(p, ""); }, "empty file"},
      {"cut.png",
       [](const std::string& p) {
         write_png(p, 64, 64, 3, std::vector<uint8_t>(64 * 64 * 3, 7));
         truncate_file(p, 0.5);
       },
       "unreadable PNG (truncated or corrupt)"},
      {"cut.jpg",
       [](const std::string& p) {
         std::vector<uint8_t> noise(64 * 64 * 3);
         for (size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<uint8_t>(i * 37 % 251);
         write_jpeg(p, 64, 64, 3, noise);
         truncate_file(p, 0.5);
       },
       "unreadable JPEG (truncated or corrupt): Premature end of JPEG file"},
  };
  for (const Bad& bad : bads) {
    SECTION(bad.name) {
      const std::string path = good + "/" + bad.name;
      bad.make(path);
      msg = error_of([&] { load_image_folder(good, {}); });
      CHECK_THAT(msg, Catch::StartsWith(path + ": ") && Catch::Contains(bad.reason));

      ImageFolder skipped = load_image_folder(good, {.skip_bad = true});
      CHECK(skipped.dataset.size() == 4);
      REQUIRE(skipped.skipped.size() == 1);
      CHECK_THAT(skipped.skipped[0], Catch::StartsWith(path + ": ") && Catch::Contains(bad.reason));
      CHECK(std::find(skipped.files.begin(), skipped.files.end(), path) == skipped.files.end());

      // A folder of bad files alone is an error even when skipping.
      const std::string only_bad = root + "/only_bad";
      fs::create_directories(only_bad);
      bad.make(only_bad + "/" + bad.name);
      msg = error_of([&] { load_image_folder(only_bad, {.skip_bad = true}); });
      CHECK_THAT(msg, Catch::Contains(only_bad + ": none of its 1 file(s)") && Catch::Contains(bad.reason));
    }
  }
}

namespace {

void put_u32(std::string& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>((v >> shift) & 0xff);
}

void put_chunk(std::string& out, const std::string& type, const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const std::string body = type + data;
  out += body;
  put_u32(out, static_cast<uint32_t>(
                   crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

// A decompression bomb: a valid PNG header declaring width x height (8-bit gray or RGB),
// followed by a little compressed data; padded with a tEXt chunk to `bytes` in all.
std::string bomb_png(uint32_t width, uint32_t height, bool rgb, size_t bytes) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32(ihdr, width);
  put_u32(ihdr, height);
  ihdr += std::string{8, static_cast<char>(rgb ? 2 : 0), 0, 0, 0};
  put_chunk(png, "IHDR", ihdr);
  std::string zeros(64, '\0'), deflated(128, '\0');
  uLongf deflated_bytes = deflated.size();
  REQUIRE(compress(reinterpret_cast<Bytef*>(deflated.data()), &deflated_bytes,
                   reinterpret_cast<const Bytef*>(zeros.data()), zeros.size()) == Z_OK);
  deflated.resize(deflated_bytes);
  const size_t rest = 12 + deflated.size() + 12;  // IDAT and IEND
  REQUIRE(png.size() + 12 + 2 + rest <= bytes);
  put_chunk(png, "tEXt", std::string("c") + '\0' + std::string(bytes - png.size() - 12 - 2 - rest, 'x'));
  put_chunk(png, "IDAT", deflated);
  put_chunk(png, "IEND", "");
  return png;
}

// Runs decode_image(path) in a child process whose address space may grow by 1 GiB at most,
// as a rank under `ulimit -v` would be: 0 when it throws the Error naming the file and the
// declared size, 1 for another Error, 2 for anything else (std::bad_alloc), 3 if it decodes.
int decode_capped(const std::string& path, const std::string& declared) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    unsigned long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t bytes =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (1ul << 30);
    const rlimit cap{bytes, bytes};
    if (pages == 0 || setrlimit(RLIMIT_AS, &cap) != 0) _exit(4);
    int code = 3;
    try {
      decode_image(path);
    } catch (const Error& e) {
      code = e.message() == path + ": declares a " + declared +
                                " picture, more than 16384 pixels per side (tandem-train's "
                                "--max-image-side raises the limit)"
                 ? 0
                 : 1;
    } catch (...) {
      code = 2;
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

}  // namespace

TEST_CASE("a picture declaring sides beyond the limit is refused before its pixels are allocated",
          "[image][errors]") {
  TempDir dir("image_bomb");
  // 37837^2 RGB: 4.3 GB of pixels from 177 bytes; 100000^2 gray: 10^10 bytes, which wraps to
  // 1.4 GB in 32 bits.
  write_bytes(dir.file("rgb.png"), bomb_png(37837, 37837, true, 177));
  REQUIRE(read_bytes(dir.file("rgb.png")).size() == 177);
  write_bytes(dir.file("gray.png"), bomb_png(100000, 100000, false, 177));
  CHECK(decode_capped(dir.file("rgb.png"), "37837x37837") == 0);
  CHECK(decode_capped(dir.file("gray.png"), "100000x100000") == 0);

  // A JPEG's declared size too (its SOF0 patched to 40000 x 30000).
  write_jpeg(dir.file("small.jpg"), 8, 8, 3, std::vector<uint8_t>(8 * 8 * 3, 90), 90, false);
  std::string jpeg = read_bytes(dir.file("small.jpg"));
  const size_t sof = jpeg.find("\xff\xc0");
  REQUIRE(sof != std::string::npos);
  jpeg[sof + 5] = static_cast<char>(30000 >> 8), jpeg[sof + 6] = static_cast<char>(30000 & 0xff);
  jpeg[sof + 7] = static_cast<char>(40000 >> 8), jpeg[sof + 8] = static_cast<char>(40000 & 0xff);
  write_bytes(dir.file("big.jpg"), jpeg);
  CHECK(decode_capped(dir.file("big.jpg"), "40000x30000") == 0);

  // The limit is a parameter: an 8x8 picture passes at 8 and is refused at 7.
  write_png(dir.file("eight.png"), 8, 8, 1, std::vector<uint8_t>(64, 3));
  CHECK(decode_image(dir.file("eight.png"), 8).width == 8);
  CHECK_THROWS_WITH(decode_image(dir.file("eight.png"), 7),
                    Catch::Contains("eight.png: declares a 8x8 picture, more than 7 pixels per side"));

  // --skip-bad-images leaves such a file out, and names it.
  ImageFolder folder = load_image_folder(dir.path.string(), {.channels = 1, .side = 4, .skip_bad = true});
  CHECK(folder.files == std::vector<std::string>{dir.file("eight.png"), dir.file("small.jpg")});
  REQUIRE(folder.skipped.size() == 3);
  CHECK_THAT(folder.skipped[0], Catch::StartsWith(dir.file("big.jpg") + ": declares a 40000x30000 picture"));
  CHECK_THAT(folder.skipped[1],
             Catch::StartsWith(dir.file("gray.png") + ": declares a 100000x100000 picture"));
  CHECK_THAT(folder.skipped[2], Catch::StartsWith(dir.file("rgb.png") + ": declares a 37837x37837 picture"));
}
