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
// - check_gaussian(s, d) says what makes `s` unfit to be a Gaussian's statistics of
//   dimension d ("" when nothing): a count below 1, a mean not [d] or a covariance not
//   [d, d], a non-finite value, a covariance not symmetric (beyond 1e-9 of its largest
//   element) or with an eigenvalue below -1e-6 times its largest.
#pragma once

#include <string>

#include "models/metrics/feature_stats.h"
#include "runtime/tensor.h"

namespace tandem::metrics {

double fid(const Tensor& mu1, const Tensor& c1, const Tensor& mu2, const Tensor& c2);
double fid(const GaussianStats& a, const GaussianStats& b);
Tensor sqrt_psd(const Tensor& c);
std::string check_gaussian(const GaussianStats& s, int64_t dim);

}  // namespace tandem::metrics
