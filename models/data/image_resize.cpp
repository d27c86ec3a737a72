#include "models/data/image_resize.h"

#include <algorithm>

#include "runtime/error.h"

namespace tandem::data {

namespace {

struct Tap {
  int64_t source;
  double weight;
};

// For each of `out` output pixels along one axis, the source pixels of [0, in) its
// interval [i * in / out, (i + 1) * in / out) overlaps, weighted by overlap / length.
std::vector<std::vector<Tap>> box_taps(int64_t in, int64_t out) {
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out));
  const double step = static_cast<double>(in) / static_cast<double>(out);
  for (int64_t i = 0; i < out; ++i) {
    const double lo = static_cast<double>(i) * step, hi = static_cast<double>(i + 1) * step;
    const int64_t first = static_cast<int64_t>(lo), last = std::min(in - 1, static_cast<int64_t>(hi - 1e-9));
    for (int64_t k = first; k <= last; ++k) {
      double overlap = std::min(hi, static_cast<double>(k + 1)) - std::max(lo, static_cast<double>(k));
      if (overlap > 0) taps[static_cast<size_t>(i)].push_back({k, overlap / step});
    }
  }
  return taps;
}

}  // namespace

std::vector<float> square_resize(const DecodedImage& image, int64_t side) {
  TANDEM_CHECK(side >= 1, "square_resize: side must be at least 1, got " << side);
  TANDEM_CHECK(image.width > 0 && image.height > 0,
               "square_resize: empty image (" << image.width << "x" << image.height << ")");
  const int64_t s = std::min(image.width, image.height);
  const int64_t x0 = (image.width - s) / 2, y0 = (image.height - s) / 2;
  const int64_t c = image.channels;
  const std::vector<std::vector<Tap>> taps = box_taps(s, side);
  // Rows first: [s][side][c], then columns: [c][side][side].
  std::vector<double> rows(static_cast<size_t>(s * side * c), 0.0);
  for (int64_t y = 0; y < s; ++y) {
    for (int64_t j = 0; j < side; ++j) {
      for (const Tap& t : taps[static_cast<size_t>(j)]) {
        const uint8_t* p = image.at(x0 + t.source, y0 + y);
        for (int64_t ch = 0; ch < c; ++ch)
          rows[static_cast<size_t>((y * side + j) * c + ch)] += t.weight * p[ch];
      }
    }
  }
  std::vector<float> out(static_cast<size_t>(c * side * side));
  for (int64_t i = 0; i < side; ++i) {
    for (int64_t j = 0; j < side; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) {
        double v = 0.0;
        for (const Tap& t : taps[static_cast<size_t>(i)])
          v += t.weight * rows[static_cast<size_t>((t.source * side + j) * c + ch)];
        out[static_cast<size_t>((ch * side + i) * side + j)] = static_cast<float>(v);
      }
    }
  }
  return out;
}

}  // namespace tandem::data
