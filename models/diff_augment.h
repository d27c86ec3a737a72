// DiffAugment (Zhao et al. 2020): differentiable augmentations of every image a GAN's
// discriminator sees, reals and fakes alike, with per-sample parameters that every rank
// draws from the global batch's stream.
//
// Contract:
// - Images are NCHW Variables (float32 or float64, CPU or CUDA). Each op is built from
//   autograd ops that have differentiable backward rules (autograd/ops.h), so gradients,
//   and the second-order gradients of R1 and WGAN-GP, reach the images; the per-sample
//   parameters (one value per row of x) are constants.
//   - brightness(x, b):  x + b[n]
//   - saturation(x, s):  (x - m) * s[n] + m, m the mean over channels of each pixel
//   - contrast(x, c):    (x - m) * c[n] + m, m the mean over C, H, W of each sample
//   - translate(x, dy, dx): out[n, c, i, j] = x[n, c, i + dy[n], j + dx[n]], 0 outside x
//   - cutout(x, top, left, h, w): rows [top[n], top[n] + h) and columns [left[n], left[n] + w)
//     of sample n zeroed (clipped to the image)
// - AugmentPolicy: parse_augment_policy("translation,cutout,color") takes the groups in any
//   order, each at most once ("" or "none": no group; anything else is an Error naming the
//   known ones); str() is canonical ("color,translation,cutout" order, "none" when empty).
//   diff_augment applies the groups in that order, as DiffAugment's default policy does.
// - The parameters of one call: kAugmentUniforms uniforms in [0, 1) per sample,
//   augment_uniforms(seed, iteration, call, first_row, rows, global_rows): rows
//   [first_row, first_row + rows) of fill_uniform on a [global_rows, kAugmentUniforms]
//   float32 tensor from iteration_stream(augment_stream_key(seed, call), iteration). So W
//   ranks holding B rows each (rank r from r * B) hold the numbers one process draws for
//   W * B rows, and each (seed, call, iteration) is its own stream.
// - diff_augment(x, policy, p, uniforms): row n of `uniforms` (float32 [N, 10], on the CPU)
//   is [color gate, brightness, saturation, contrast, translation gate, dy, dx, cutout gate,
//   top, left]. A group in the policy applies to sample n when its gate < p (p = 1: always,
//   p = 0: never). brightness = u - 0.5, saturation = 2u, contrast = u + 0.5 (DiffAugment's
//   ranges); translation shifts by up to s = int(H / 8 + 0.5) rows (dy = floor(u (2s + 1))
//   - s, same for dx with W); cutout zeroes a square of int(H / 2 + 0.5) x int(W / 2 + 0.5)
//   whose top row is floor(u (H + 1 - h % 2)) - h / 2 (DiffAugment's offsets), same for left.
// - DiffAugment is the callable a GanModel uses (gan.h): operator()(x, iteration, call)
//   augments this rank's rows x, every rank holding as many rows (rank r's start at r * N).
//   With track_real_signs set, record_real_logits(d) adds sum(sign(d)) and numel(d) to
//   the counts that take_real_signs() returns and clears (the adaptive p's evidence).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem::models {

constexpr int64_t kAugmentUniforms = 10;

// The calls of one GanModel step, each its own stream: D's reals (also what the penalties
// see), D's fakes (also R2's), G's fakes (one call per G micro-step, kAugmentGenerator + k)
// and, with the relativistic loss, the reals D judges in G's k-th micro-step
// (kAugmentGeneratorReal + k, clear of the G calls for any accumulation count).
constexpr int64_t kAugmentReal = 0;
constexpr int64_t kAugmentFake = 1;
constexpr int64_t kAugmentGenerator = 2;
constexpr int64_t kAugmentGeneratorReal = int64_t{1} << 20;

struct AugmentPolicy {
  bool color = false;
  bool translation = false;
  bool cutout = false;

  bool any() const { return color || translation || cutout; }
  std::string str() const;
};

AugmentPolicy parse_augment_policy(const std::string& text);

Variable brightness(const Variable& x, const std::vector<double>& shift);
Variable saturation(const Variable& x, const std::vector<double>& factor);
Variable contrast(const Variable& x, const std::vector<double>& factor);
Variable translate(const Variable& x, const std::vector<int64_t>& dy, const std::vector<int64_t>& dx);
Variable cutout(const Variable& x, const std::vector<int64_t>& top, const std::vector<int64_t>& left,
                int64_t height, int64_t width);

uint64_t augment_stream_key(uint64_t seed, int64_t call);
Tensor augment_uniforms(uint64_t seed, int64_t iteration, int64_t call, int64_t first_row, int64_t rows,
                        int64_t global_rows);
Variable diff_augment(const Variable& x, const AugmentPolicy& policy, double p, const Tensor& uniforms);

class DiffAugment {
 public:
  DiffAugment(AugmentPolicy policy, uint64_t seed, int rank, int world_size);

  Variable operator()(const Variable& x, int64_t iteration, int64_t call) const;

  const AugmentPolicy& policy() const { return policy_; }
  double p() const { return p_; }
  void set_p(double p);

  bool track_real_signs = false;
  void record_real_logits(const Variable& d_real);
  std::pair<double, double> take_real_signs();  // {sum of signs, count}

 private:
  AugmentPolicy policy_;
  uint64_t seed_;
  int rank_, world_size_;
  double p_ = 1.0;
  double sign_sum_ = 0.0, sign_count_ = 0.0;
};

}  // namespace tandem::models
