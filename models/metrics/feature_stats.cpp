#include "models/metrics/feature_stats.h"

#include <Eigen/Core>
#include <cstring>

#include "runtime/error.h"

namespace tandem::metrics {

namespace {

using RowMatrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

}  // namespace

FeatureStats::FeatureStats(int64_t dim) : dim_(dim), sum_(static_cast<size_t>(dim), 0.0) {
  TANDEM_CHECK(dim > 0, "FeatureStats: dim must be positive, got " << dim);
  outer_.assign(static_cast<size_t>(dim * dim), 0.0);
}

void FeatureStats::add(const Tensor& features) {
  TANDEM_CHECK(features.dim() == 2 && features.size(1) == dim_, "FeatureStats::add: features must be [n, "
                                                                    << dim_ << "], got "
                                                                    << shape_str(features.shape()));
  const int64_t n = features.size(0);
  if (n == 0) return;
  const Tensor host = features.to(Device::cpu()).to(DType::f64);
  const Eigen::Map<const RowMatrix> x(host.data<double>(), n, dim_);
  Eigen::Map<Eigen::VectorXd> sum(sum_.data(), dim_);
  Eigen::Map<RowMatrix> outer(outer_.data(), dim_, dim_);
  sum += x.colwise().sum().transpose();
  outer.noalias() += x.transpose() * x;
  count_ += n;
}

void FeatureStats::allreduce(dist::ProcessGroup& group, const std::string& tag) {
  // count, sum and outer products in one message: one collective, whatever the rank count.
  const size_t d = sum_.size();
  Tensor flat = Tensor::empty({static_cast<int64_t>(1 + d + outer_.size())}, DType::f64);
  double* p = flat.data<double>();
  p[0] = static_cast<double>(count_);
  std::memcpy(p + 1, sum_.data(), d * sizeof(double));
  std::memcpy(p + 1 + d, outer_.data(), outer_.size() * sizeof(double));
  dist::allreduce_host(group, flat, dist::ReduceOp::sum, tag);
  count_ = static_cast<int64_t>(p[0]);
  std::memcpy(sum_.data(), p + 1, d * sizeof(double));
  std::memcpy(outer_.data(), p + 1 + d, outer_.size() * sizeof(double));
}

GaussianStats FeatureStats::gaussian() const {
  TANDEM_CHECK(count_ >= 2, "FeatureStats::gaussian: needs at least 2 samples, has " << count_);
  GaussianStats g;
  g.count = count_;
  g.mean = Tensor::empty({dim_}, DType::f64);
  g.cov = Tensor::empty({dim_, dim_}, DType::f64);
  Eigen::Map<Eigen::VectorXd> mean(g.mean.data<double>(), dim_);
  Eigen::Map<RowMatrix> cov(g.cov.data<double>(), dim_, dim_);
  const double n = static_cast<double>(count_);
  mean = Eigen::Map<const Eigen::VectorXd>(sum_.data(), dim_) / n;
  cov = (Eigen::Map<const RowMatrix>(outer_.data(), dim_, dim_) - n * mean * mean.transpose()) / (n - 1.0);
  return g;
}

}  // namespace tandem::metrics
