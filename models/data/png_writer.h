// PNG pictures of generator samples, written with libpng.
//
// Contract:
// - Every writer writes `path + ".tmp"` in the same directory and renames it over `path`,
//   so a reader never sees a half-written picture. The temporary is made fresh
//   (runtime/file_write.h's fopen_fresh): a link at either name is replaced, never written
//   through. Any failure (an unwritable or missing
//   directory, a libpng error) is an Error naming `path` and the cause, and leaves no .tmp.
// - Grids: images [N, C, H, W] (C = 1 for gray, 3 for RGB; any float dtype, any device)
//   with values in [-1, 1] map to bytes round((v + 1) * 127.5), clamped (NaN -> 0). Tiles
//   are laid out row-major, min(columns, N) per row, each scaled `scale` times
//   (nearest neighbour), separated and framed by kGridBorder-pixel borders of value
//   kGridBorderValue.
// - The ring8 scatter is size x size RGB over the square [-3, 3]^2 (x right, y up): a
//   white background, light gray axes, samples [N, 2] as small dark dots, and each true
//   mode as a red circle (drawn last, so it stays visible) of radius 3 sigma of ring8, at
//   least 6 pixels. Points outside the square are not drawn.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace tandem::data {

constexpr int64_t kGridBorder = 2;
constexpr uint8_t kGridBorderValue = 128;
constexpr double kScatterRange = 3.0;  // axes cover [-kScatterRange, kScatterRange]

// Raw 8-bit pixels, row-major, `channels` (1 gray, 3 RGB) interleaved per pixel.
void write_png(const std::string& path, int64_t width, int64_t height, int channels,
               const std::vector<uint8_t>& pixels);

void write_png_gray_grid(const std::string& path, const Tensor& images, int64_t columns, int64_t scale = 1);
void write_png_rgb_grid(const std::string& path, const Tensor& images, int64_t columns, int64_t scale = 1);

void write_ring8_scatter_png(const std::string& path, const Tensor& samples,
                             const std::vector<std::pair<double, double>>& modes, int64_t size = 512);

}  // namespace tandem::data
