// The Frechet Inception Distance between two Gaussians (Heusel et al. 2017), with any
// feature network (feature_net.h gives tandem's own).
//
// Contract: fid(mu1, c1, mu2, c2) = |mu1 - mu2|^2 + tr(c1) + tr(c2)
//   - 2 tr((c1^{1/2} c2 c1^{1/2})^{1/2}), computed in float64 on the host. Both square roots
//   are of symmetric positive semi-definite matrices, taken through an eigen-decomposition
//   (eigenvalues below 0, rounding, clamped to 0). mu: [d], c: [d, d], any float dtype, on
//   the CPU; mismatched shapes are an Error naming them. The value may be a rounding error
//   below 0 when the Gaussians are equal. fid(a, b) takes GaussianStats.
// - sqrt_psd(c) is that square root of a symmetric [d, d] matrix, float64.
#pragma once

#include "models/metrics/feature_stats.h"
#include "runtime/tensor.h"

namespace tandem::metrics {

double fid(const Tensor& mu1, const Tensor& c1, const Tensor& mu2, const Tensor& c2);
double fid(const GaussianStats& a, const GaussianStats& b);
Tensor sqrt_psd(const Tensor& c);

}  // namespace tandem::metrics
