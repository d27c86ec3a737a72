#include "models/metrics/fid_evaluator.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "autograd/grad_mode.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/fid.h"
#include "models/metrics/shipped_feature_net.h"
#include "runtime/error.h"

namespace tandem::metrics {

namespace {

bool all_finite(const Tensor& t) {
  for (const double v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

FidEvaluator::FidEvaluator(FidEvaluatorOptions options, dist::ProcessGroup& group, const LogLine& log)
    : options_(std::move(options)), group_(group) {
  if (options_.cache.empty()) options_.cache = default_fid_cache_dir();
  TANDEM_CHECK(options_.samples > 0, "FID: " << options_.samples << " samples");
  if (options_.network == FeatureNetSource::shipped) {
    net_ = load_shipped_feature_net(shipped_feature_net_path());
  } else {
    try {
      net_ = load_or_train_feature_net(options_.data_dir, options_.cache, FeatureNetConfig{}, group, log);
    } catch (const Error& e) {
      TANDEM_FAIL("FID's feature network (cache " << options_.cache << "): " << e.message());
    }
  }
  const data::ImageDataset test = data::load_fashion_mnist(options_.data_dir, false);
  try {
    real_ = real_stats(*net_.net, net_.weights_id, test, data::dataset_identity(test), options_.cache, group,
                       log);
  } catch (const Error& e) {
    TANDEM_FAIL("FID's real statistics (cache " << options_.cache << "): " << e.message());
  }
}

double FidEvaluator::evaluate(const GenerateImages& generate, const Shape& noise_shape) {
  NoGradGuard no_grad;  // samples are measured, not trained through
  const GaussianStats stats =
      generated_stats(*net_.net, generate, noise_shape, options_.samples, options_.seed, group_);
  // The statistics are the allreduced sums, equal on every rank: every rank takes this
  // branch together.
  if (!all_finite(stats.mean) || !all_finite(stats.cov)) return std::numeric_limits<double>::quiet_NaN();
  return fid(stats, real_);
}

std::string FidEvaluator::line(const std::string& name, int64_t iteration, double value) const {
  if (std::isnan(value))
    return name + ": non-finite samples at iteration " + std::to_string(iteration) +
           " (the generator's output is not finite: no FID, training goes on)";
  char text[160];
  std::snprintf(text, sizeof text, "%s %.4f at iteration %lld (features %s, %lld samples)", name.c_str(),
                value, static_cast<long long>(iteration), short_hash(net_.weights_id).c_str(),
                static_cast<long long>(options_.samples));
  return text;
}

}  // namespace tandem::metrics
