// Normalisation layers without running statistics, as modern GANs use them: GroupNorm,
// InstanceNorm2d and LayerNorm (PyTorch's semantics), built from differentiable ops, so
// they have every order of gradient (an R1 or path-length penalty differentiates through
// them) and run on either device.
//
// Contract:
// - GroupNorm(G, C): x [N, C, ...] with C divisible by G; each sample's channels are split
//   into G groups of C/G channels, and each group is normalised over its channels and every
//   axis after them: (x - mean) / sqrt(var + eps), var the biased variance (as PyTorch).
//   With affine (the default) a per-channel weight (ones) and bias (zeros) follow.
// - InstanceNorm2d(C): x [N, C, H, W], each (sample, channel) plane normalised on its own:
//   GroupNorm with G = C, but affine off by default (as PyTorch) and no running statistics.
// - LayerNorm(normalized_shape): x [..., normalized_shape...]: each sample normalised over
//   its last normalized_shape.size() axes; with elementwise_affine (the default) a weight
//   (ones) and bias (zeros) of normalized_shape follow.
// - group_norm and layer_norm are the same forward as functions.
// - A wrong input shape (rank, channels, trailing axes) is an Error naming the layer and
//   both shapes. The statistics are those of this rank's batch: as BatchNorm without
//   SyncBatchNorm, except that these layers never mix samples, so N ranks equal one
//   process on the global batch with them.
#pragma once

#include <string>

#include "autograd/module.h"

namespace tandem::nn {

inline constexpr double kNormDefaultEps = 1e-5;

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = kNormDefaultEps, bool affine = true);
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // [C], ones; undefined without affine
  Variable bias;    // [C], zeros; undefined without affine
  int64_t num_groups, num_channels;
  double eps;
};

class InstanceNorm2d : public GroupNorm {
 public:
  explicit InstanceNorm2d(int64_t num_channels, double eps = kNormDefaultEps, bool affine = false);
  Variable forward(const Variable& x) override;
  std::string type_name() const override;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = kNormDefaultEps, bool elementwise_affine = true);
  Variable forward(const Variable& x) override;
  std::string type_name() const override;

  Variable weight;  // normalized_shape, ones; undefined without elementwise_affine
  Variable bias;    // normalized_shape, zeros; undefined without elementwise_affine
  Shape normalized_shape;
  double eps;
};

// The layers' forward as functions (weight and bias may be undefined: no affine), e.g. for
// float64 gradient checks or parameters kept elsewhere.
Variable group_norm(const Variable& x, int64_t num_groups, const Variable& weight, const Variable& bias,
                    double eps = kNormDefaultEps);
Variable layer_norm(const Variable& x, const Shape& normalized_shape, const Variable& weight,
                    const Variable& bias, double eps = kNormDefaultEps);

}  // namespace tandem::nn
