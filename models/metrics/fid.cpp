#include "models/metrics/fid.h"

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>

#include "runtime/error.h"

namespace tandem::metrics {

namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

RowMatrix host_matrix(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::f64);
  return Eigen::Map<const RowMatrix>(h.data<double>(), h.size(0), h.size(1));
}

Eigen::VectorXd host_vector(const Tensor& t) {
  const Tensor h = t.to(Device::cpu()).to(DType::f64);
  return Eigen::Map<const Eigen::VectorXd>(h.data<double>(), h.numel());
}

// The eigenvalues of a symmetric matrix (its symmetric part, so rounding asymmetry of a
// product does not matter), negative ones clamped to 0, and the eigenvectors.
Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen_psd(const Eigen::MatrixXd& m) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(0.5 * (m + m.transpose()));
  TANDEM_CHECK(solver.info() == Eigen::Success, "fid: the eigen-decomposition did not converge");
  return solver;
}

Eigen::MatrixXd sqrt_psd_matrix(const Eigen::MatrixXd& m) {
  const auto solver = eigen_psd(m);
  const Eigen::VectorXd roots = solver.eigenvalues().cwiseMax(0.0).cwiseSqrt();
  return solver.eigenvectors() * roots.asDiagonal() * solver.eigenvectors().transpose();
}

}  // namespace

Tensor sqrt_psd(const Tensor& c) {
  TANDEM_CHECK(c.dim() == 2 && c.size(0) == c.size(1),
               "sqrt_psd: needs a square matrix, got " << shape_str(c.shape()));
  const RowMatrix root = sqrt_psd_matrix(host_matrix(c));
  Tensor out = Tensor::empty(c.shape(), DType::f64);
  Eigen::Map<RowMatrix>(out.data<double>(), root.rows(), root.cols()) = root;
  return out;
}

double fid(const Tensor& mu1, const Tensor& c1, const Tensor& mu2, const Tensor& c2) {
  const int64_t d = mu1.numel();
  TANDEM_CHECK(mu1.dim() == 1 && mu2.dim() == 1 && mu2.numel() == d && c1.dim() == 2 && c2.dim() == 2 &&
                   c1.size(0) == d && c1.size(1) == d && c2.size(0) == d && c2.size(1) == d,
               "fid: needs mu [d] and c [d, d] on both sides, got mu1 "
                   << shape_str(mu1.shape()) << ", c1 " << shape_str(c1.shape()) << ", mu2 "
                   << shape_str(mu2.shape()) << ", c2 " << shape_str(c2.shape()));
  const Eigen::MatrixXd a = host_matrix(c1);
  const Eigen::MatrixXd b = host_matrix(c2);
  const Eigen::MatrixXd root_a = sqrt_psd_matrix(a);
  const Eigen::VectorXd middle = eigen_psd(root_a * b * root_a).eigenvalues().cwiseMax(0.0).cwiseSqrt();
  return (host_vector(mu1) - host_vector(mu2)).squaredNorm() + a.trace() + b.trace() - 2.0 * middle.sum();
}

double fid(const GaussianStats& a, const GaussianStats& b) { return fid(a.mean, a.cov, b.mean, b.cov); }

std::string check_gaussian(const GaussianStats& s, int64_t dim) {
  if (s.count < 1) return "a count of " + std::to_string(s.count) + " samples";
  if (!s.mean.defined() || s.mean.shape() != Shape{dim})
    return "a mean of shape " + (s.mean.defined() ? shape_str(s.mean.shape()) : std::string("(none)")) +
           ", not [" + std::to_string(dim) + "]";
  if (!s.cov.defined() || s.cov.shape() != Shape{dim, dim})
    return "a covariance of shape " + (s.cov.defined() ? shape_str(s.cov.shape()) : std::string("(none)")) +
           ", not [" + std::to_string(dim) + ", " + std::to_string(dim) + "]";
  const Eigen::VectorXd mean = host_vector(s.mean);
  const RowMatrix cov = host_matrix(s.cov);
  if (!mean.allFinite()) return "a mean that is not finite";
  if (!cov.allFinite()) return "a covariance that is not finite";
  const double largest = cov.cwiseAbs().maxCoeff();
  if ((cov - cov.transpose()).cwiseAbs().maxCoeff() > 1e-9 * largest)
    return "a covariance that is not symmetric";
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(Eigen::MatrixXd(cov), Eigen::EigenvaluesOnly);
  if (solver.info() != Eigen::Success) return "a covariance whose eigen-decomposition does not converge";
  const Eigen::VectorXd values = solver.eigenvalues();
  if (values.minCoeff() < -1e-6 * std::max(values.maxCoeff(), 0.0) || values.maxCoeff() < 0)
    return "a covariance that is not positive semi-definite (eigenvalue " +
           std::to_string(values.minCoeff()) + ")";
  return "";
}

}  // namespace tandem::metrics
