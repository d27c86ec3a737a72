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

// The box filter of a square of s x s pixels with c channels, pixel(x, y, ch) its values,
// to side x side: rows first ([s][side][c]), then columns, written planar [c][side][side].
template <typename Pixel>
void resize_square(Pixel pixel, int64_t s, int64_t c, int64_t side, float* out) {
  const std::vector<std::vector<Tap>> taps = box_taps(s, side);
  std::vector<double> rows(static_cast<size_t>(s * side * c), 0.0);
  for (int64_t y = 0; y < s; ++y) {
    for (int64_t j = 0; j < side; ++j) {
      for (const Tap& t : taps[static_cast<size_t>(j)]) {
        for (int64_t ch = 0; ch < c; ++ch)
          rows[static_cast<size_t>((y * side + j) * c + ch)] += t.weight * pixel(t.source, y, ch);
      }
    }
  }
  for (int64_t i = 0; i < side; ++i) {
    for (int64_t j = 0; j < side; ++j) {
      for (int64_t ch = 0; ch < c; ++ch) {
        double v = 0.0;
        for (const Tap& t : taps[static_cast<size_t>(i)])
          v += t.weight * rows[static_cast<size_t>((t.source * side + j) * c + ch)];
        out[(ch * side + i) * side + j] = static_cast<float>(v);
      }
    }
  }
}

}  // namespace

std::vector<float> square_resize(const DecodedImage& image, int64_t side) {
  TANDEM_CHECK(side >= 1, "square_resize: side must be at least 1, got " << side);
  TANDEM_CHECK(image.width > 0 && image.height > 0,
               "square_resize: empty image (" << image.width << "x" << image.height << ")");
  const int64_t s = std::min(image.width, image.height);
  const int64_t x0 = (image.width - s) / 2, y0 = (image.height - s) / 2;
  const int64_t c = image.channels;
  std::vector<float> out(static_cast<size_t>(c * side * side));
  resize_square([&](int64_t x, int64_t y, int64_t ch) { return image.at(x0 + x, y0 + y)[ch]; }, s, c, side,
                out.data());
  return out;
}

Tensor resize_images(const Tensor& images, int64_t side) {
  TANDEM_CHECK(side >= 1, "resize_images: side must be at least 1, got " << side);
  TANDEM_CHECK(images.defined() && images.dim() == 4 && images.size(2) == images.size(3) &&
                   images.dtype() == DType::f32 && images.device().is_cpu(),
               "resize_images: needs square float32 pictures [N, C, S, S] on the CPU, got "
                   << (images.defined() ? images.str() : std::string("an undefined tensor")));
  const int64_t n = images.size(0), c = images.size(1), s = images.size(2);
  Tensor out = Tensor::empty({n, c, side, side});
  if (s == 0) {
    TANDEM_CHECK(n * c == 0, "resize_images: empty pictures " << images.str());
    return out;
  }
  const float* in = images.data<float>();
  float* o = out.data<float>();
  for (int64_t k = 0; k < n; ++k) {
    const float* picture = in + k * c * s * s;
    resize_square([&](int64_t x, int64_t y, int64_t ch) { return picture[(ch * s + y) * s + x]; }, s, c, side,
                  o + k * c * side * side);
  }
  return out;
}

}  // namespace tandem::data
