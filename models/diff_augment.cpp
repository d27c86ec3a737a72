#include "models/diff_augment.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/ops.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace tandem::models {

namespace {

// Column of each parameter in a row of augment_uniforms.
enum Column : int64_t {
  kColorGate,
  kBrightness,
  kSaturation,
  kContrast,
  kTranslationGate,
  kShiftY,
  kShiftX,
  kCutoutGate,
  kTop,
  kLeft
};

void check_images(const Variable& x, const char* op, size_t values) {
  TANDEM_CHECK(x.dim() == 4, op << ": takes NCHW images, got " << shape_str(x.shape()));
  TANDEM_CHECK(static_cast<size_t>(x.size(0)) == values,
               op << ": " << values << " per-sample values for " << x.size(0) << " samples");
}

// One value per sample as a [N, 1, 1, 1] constant beside x.
Variable per_sample(const Variable& x, const std::vector<double>& values) {
  return Variable(Tensor::from_values({x.size(0), 1, 1, 1}, values, x.dtype()).to(x.device()));
}

// floor(u * n) for u in [0, 1): an integer in [0, n).
int64_t below(double u, int64_t n) { return std::min(n - 1, static_cast<int64_t>(std::floor(u * n))); }

}  // namespace

std::string AugmentPolicy::str() const {
  std::string out;
  for (const auto& [on, name] :
       {std::pair{color, "color"}, {translation, "translation"}, {cutout, "cutout"}}) {
    if (!on) continue;
    if (!out.empty()) out += ",";
    out += name;
  }
  return out.empty() ? "none" : out;
}

AugmentPolicy parse_augment_policy(const std::string& text) {
  AugmentPolicy policy;
  if (text.empty() || text == "none") return policy;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    bool* group = name == "color"         ? &policy.color
                  : name == "translation" ? &policy.translation
                  : name == "cutout"      ? &policy.cutout
                                          : nullptr;
    TANDEM_CHECK(group != nullptr, "augmentation '" << name << "' in '" << text
                                                    << "' is not one of color, translation, cutout");
    TANDEM_CHECK(!*group, "augmentation '" << name << "' is named twice in '" << text << "'");
    *group = true;
  }
  return policy;
}

Variable brightness(const Variable& x, const std::vector<double>& shift) {
  check_images(x, "brightness", shift.size());
  return x + per_sample(x, shift);
}

Variable saturation(const Variable& x, const std::vector<double>& factor) {
  check_images(x, "saturation", factor.size());
  Variable m = mean(x, 1, /*keepdim=*/true);
  return (x - m) * per_sample(x, factor) + m;
}

Variable contrast(const Variable& x, const std::vector<double>& factor) {
  check_images(x, "contrast", factor.size());
  const int64_t n = x.size(0);
  Variable m = reshape(mean(reshape(x, {n, x.numel() / n}), 1, /*keepdim=*/true), {n, 1, 1, 1});
  return (x - m) * per_sample(x, factor) + m;
}

Variable translate(const Variable& x, const std::vector<int64_t>& dy, const std::vector<int64_t>& dx) {
  check_images(x, "translate", dy.size());
  TANDEM_CHECK(dx.size() == dy.size(),
               "translate: " << dy.size() << " row shifts, " << dx.size() << " column");
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3), count = x.numel();
  // A gather from x's elements followed by one zero (index `count`) for the pixels that
  // come from outside: index_select's gradient scatters back, and has a rule of its own.
  std::vector<double> index(static_cast<size_t>(count));
  size_t k = 0;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j, ++k) {
          const int64_t si = i + dy[static_cast<size_t>(s)], sj = j + dx[static_cast<size_t>(s)];
          const bool inside = si >= 0 && si < h && sj >= 0 && sj < w;
          index[k] = static_cast<double>(inside ? ((s * c + ch) * h + si) * w + sj : count);
        }
      }
    }
  }
  Variable padded = concat({reshape(x, {count}), Variable(Tensor::zeros({1}, x.dtype(), x.device()))}, 0);
  const Tensor where = Tensor::from_values({count}, index, DType::i64).to(x.device());
  return reshape(index_select(padded, 0, where), x.shape());
}

Variable cutout(const Variable& x, const std::vector<int64_t>& top, const std::vector<int64_t>& left,
                int64_t height, int64_t width) {
  check_images(x, "cutout", top.size());
  TANDEM_CHECK(left.size() == top.size(), "cutout: " << top.size() << " tops, " << left.size() << " lefts");
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  std::vector<double> keep(static_cast<size_t>(n * h * w), 1.0);
  for (int64_t s = 0; s < n; ++s) {
    const int64_t t = top[static_cast<size_t>(s)], l = left[static_cast<size_t>(s)];
    for (int64_t i = std::max<int64_t>(t, 0); i < std::min(t + height, h); ++i) {
      for (int64_t j = std::max<int64_t>(l, 0); j < std::min(l + width, w); ++j)
        keep[static_cast<size_t>((s * h + i) * w + j)] = 0.0;
    }
  }
  return x * Variable(Tensor::from_values({n, 1, h, w}, keep, x.dtype()).to(x.device()));
}

uint64_t augment_stream_key(uint64_t seed, int64_t call) {
  // Purposes from 0x100 up, clear of the trainer's data, noise and mixing streams (1-3).
  const uint64_t purpose = 0x100 + static_cast<uint64_t>(call);
  return seed * 0x9E3779B97F4A7C15ull ^ purpose * 0x94D049BB133111EBull;
}

Tensor augment_uniforms(uint64_t seed, int64_t iteration, int64_t call, int64_t first_row, int64_t rows,
                        int64_t global_rows) {
  TANDEM_CHECK(call >= 0 && first_row >= 0 && rows >= 0 && first_row + rows <= global_rows,
               "augment_uniforms: rows [" << first_row << ", " << first_row + rows << ") of " << global_rows
                                          << ", call " << call);
  return rand_rows({rows, kAugmentUniforms}, first_row, augment_stream_key(seed, call), iteration);
}

Variable diff_augment(const Variable& x, const AugmentPolicy& policy, double p, const Tensor& uniforms) {
  TANDEM_CHECK(x.dim() == 4, "diff_augment: takes NCHW images, got " << shape_str(x.shape()));
  const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
  TANDEM_CHECK(uniforms.dim() == 2 && uniforms.size(0) == n && uniforms.size(1) == kAugmentUniforms,
               "diff_augment: parameters " << shape_str(uniforms.shape()) << " for " << n << " samples");
  const Tensor u = uniforms.to(Device::cpu());
  auto at = [&](int64_t s, Column col) { return u.at(s * kAugmentUniforms + col); };
  // Which samples a group applies to; a group that applies to none is skipped, so p = 0
  // leaves the images exactly as they are.
  auto gated = [&](Column gate, std::vector<bool>& on) {
    on.assign(static_cast<size_t>(n), false);
    bool any = false;
    for (int64_t s = 0; s < n; ++s) any |= on[static_cast<size_t>(s)] = at(s, gate) < p;
    return any;
  };
  std::vector<bool> on;
  Variable out = x;
  if (policy.color && gated(kColorGate, on)) {
    std::vector<double> b(n), sat(n), con(n);
    for (int64_t s = 0; s < n; ++s) {
      const bool apply = on[static_cast<size_t>(s)];
      b[s] = apply ? at(s, kBrightness) - 0.5 : 0.0;
      sat[s] = apply ? 2.0 * at(s, kSaturation) : 1.0;
      con[s] = apply ? at(s, kContrast) + 0.5 : 1.0;
    }
    out = contrast(saturation(brightness(out, b), sat), con);
  }
  if (policy.translation && gated(kTranslationGate, on)) {
    const int64_t sy = static_cast<int64_t>(h * 0.125 + 0.5), sx = static_cast<int64_t>(w * 0.125 + 0.5);
    std::vector<int64_t> dy(n, 0), dx(n, 0);
    for (int64_t s = 0; s < n; ++s) {
      if (!on[static_cast<size_t>(s)]) continue;
      dy[s] = below(at(s, kShiftY), 2 * sy + 1) - sy;
      dx[s] = below(at(s, kShiftX), 2 * sx + 1) - sx;
    }
    out = translate(out, dy, dx);
  }
  if (policy.cutout && gated(kCutoutGate, on)) {
    const int64_t ch = static_cast<int64_t>(h * 0.5 + 0.5), cw = static_cast<int64_t>(w * 0.5 + 0.5);
    std::vector<int64_t> top(n, h), left(n, w);  // outside the image: nothing cut
    for (int64_t s = 0; s < n; ++s) {
      if (!on[static_cast<size_t>(s)]) continue;
      top[s] = below(at(s, kTop), h + 1 - ch % 2) - ch / 2;
      left[s] = below(at(s, kLeft), w + 1 - cw % 2) - cw / 2;
    }
    out = cutout(out, top, left, ch, cw);
  }
  return out;
}

DiffAugment::DiffAugment(AugmentPolicy policy, uint64_t seed, int rank, int world_size)
    : policy_(policy), seed_(seed), rank_(rank), world_size_(world_size) {
  TANDEM_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
               "DiffAugment: rank " << rank << " of " << world_size);
}

Variable DiffAugment::operator()(const Variable& x, int64_t iteration, int64_t call) const {
  if (!policy_.any()) return x;
  const int64_t rows = x.size(0);
  const Tensor u = augment_uniforms(seed_, iteration, call, rank_ * rows, rows, world_size_ * rows);
  return diff_augment(x, policy_, p_, u);
}

void DiffAugment::set_p(double p) {
  TANDEM_CHECK(p >= 0.0 && p <= 1.0, "DiffAugment: p " << p << " is outside [0, 1]");
  p_ = p;
}

void DiffAugment::record_real_logits(const Variable& d_real) {
  for (double v : d_real.data().to(Device::cpu()).to_vector()) sign_sum_ += v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0;
  sign_count_ += static_cast<double>(d_real.numel());
}

std::pair<double, double> DiffAugment::take_real_signs() {
  const std::pair<double, double> out{sign_sum_, sign_count_};
  sign_sum_ = sign_count_ = 0.0;
  return out;
}

}  // namespace tandem::models
