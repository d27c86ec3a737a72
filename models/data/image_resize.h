// Fitting a picture to a model's square resolution: centre crop, then area average.
//
// Contract: square_resize(image, side) crops the largest centred square (side s =
// min(width, height), starting at ((width - s) / 2, (height - s) / 2), rounded down) and
// resizes it to side x side. Each output pixel is the average of the source square's area
// it covers, every source pixel weighted by the fraction of it inside that area (an exact
// box filter: a 56x56 square to 28x28 averages 2x2 blocks). The same rule enlarges a square
// smaller than `side`: an output pixel inside one source pixel takes its value (nearest
// neighbour), one across a boundary blends the two. The result is float32 values in
// [0, 255], planar: [channels, side, side]. An empty image or side < 1 is an Error.
// resize_images applies the same rule to a batch of square float32 pictures [N, C, S, S]
// (e.g. Fashion-MNIST's 28x28 in [-1, 1] enlarged to a 64x64 model) -> [N, C, side, side].
#pragma once

#include <cstdint>
#include <vector>

#include "models/data/image_decode.h"
#include "runtime/tensor.h"

namespace tandem::data {

std::vector<float> square_resize(const DecodedImage& image, int64_t side);
Tensor resize_images(const Tensor& images, int64_t side);

}  // namespace tandem::data
