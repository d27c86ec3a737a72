// Decoding one picture file (PNG or JPEG) into 8-bit pixels.
//
// Contract:
// - decode_image(path) reads the file and decides its format from its first bytes (PNG:
//   89 50 4E 47 0D 0A 1A 0A; JPEG: FF D8 FF), never from its name. PNG is decoded with
//   libpng (any bit depth, palette, gray or colour; 16-bit samples are reduced to 8 bits;
//   an alpha channel is composited onto black), JPEG with libjpeg (gray or YCbCr; CMYK is
//   refused). The result holds the file's own channels: 1 (gray) or 3 (RGB), interleaved
//   per pixel, rows top to bottom.
// - Every problem is an Error naming the file and the reason: it cannot be opened, it is
//   empty, it is neither PNG nor JPEG (with its first bytes), or the decoder stops (a
//   truncated file, a bad checksum, corrupt data). A JPEG decoder warning (such as
//   "Premature end of JPEG file", where libjpeg would fill the rest with gray) counts as
//   an error too: no picture is ever half made up.
// - Size (a decompression bomb: a few hundred bytes can declare a picture of gigabytes):
//   decode_image(path, max_side) reads the declared width and height from the header and,
//   before allocating anything for the pixels, refuses a picture wider or higher than
//   max_side (kMaxImageSide by default): an Error "<path>: declares a <W>x<H> picture, more
//   than <max_side> pixels per side (tandem-train's --max-image-side raises the limit)".
//   Sizes are computed in 64 bits, so no declared size can wrap to a small allocation.
// - to_channels(image, c) converts to c channels: gray to RGB repeats the value, RGB to
//   gray is round(0.299 R + 0.587 G + 0.114 B) (ITU-R BT.601, as JPEG's own YCbCr).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::data {

struct DecodedImage {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 0;             // 1 or 3
  std::vector<uint8_t> pixels;  // height * width * channels bytes
  const uint8_t* at(int64_t x, int64_t y) const {
    return &pixels[static_cast<size_t>((y * width + x) * channels)];
  }
};

constexpr int64_t kMaxImageSide = 16384;

DecodedImage decode_image(const std::string& path, int64_t max_side = kMaxImageSide);
DecodedImage to_channels(const DecodedImage& image, int channels);

}  // namespace tandem::data
