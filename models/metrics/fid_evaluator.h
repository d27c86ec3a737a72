// FID of any generator against Fashion-MNIST's test set, for a training program of one's own
// (tandem-train's FidMonitor is one user): the feature network and the real statistics are
// loaded (or made once and cached) at construction, then each evaluate() is one sample set.
//
// Contract:
// - FidEvaluator(options, group, log) is collective. The feature network: with
//   FeatureNetSource::shipped (the default) the one tandem ships (shipped_feature_net.h:
//   every machine the same weights, checked by their SHA-256), with ::train the default
//   recipe's, trained on first use on Fashion-MNIST's training set in options.data_dir and
//   cached in options.cache ("": default_fid_cache_dir()) by load_or_train_feature_net
//   (feature_net.h: this machine's weights). Then real_stats (fid_eval.h) of the 10000 test
//   images, cached in options.cache under the network's weights_id. Every rank gets the same
//   network and statistics. A failure is an Error naming the file or cache and what failed.
// - evaluate(generate, noise_shape) is collective: the FID of options.samples images that
//   generate(noise) makes ([b, 1, 28, 28] float32 on the CPU, in [-1, 1], from CPU noise
//   [b, noise_shape...]) from the sample set's noise (generated_stats: rows of options.seed's
//   stream, split over the ranks, the same set at any rank count); the same value on every
//   rank, NaN when the samples' statistics are not finite. generate runs without recording
//   a graph (NoGradGuard).
// - line(name, iteration, value): "<name> <value, 4 decimals> at iteration <i> (features
//   <the network's weights_id, 8 digits>, <N> samples)", or for NaN "<name>: non-finite samples at iteration
//   <i> (the generator's output is not finite: no FID, training goes on)".
#pragma once

#include <cstdint>
#include <string>

#include "models/data/dataset.h"
#include "models/metrics/feature_net.h"
#include "models/metrics/feature_stats.h"
#include "models/metrics/fid_eval.h"
#include "runtime/dist/process_group.h"

namespace tandem::metrics {

enum class FeatureNetSource { shipped, train };

struct FidEvaluatorOptions {
  FeatureNetSource network = FeatureNetSource::shipped;
  std::string data_dir = data::kFashionMnistDefaultDir;
  std::string cache;  // "": default_fid_cache_dir()
  int64_t samples = 10000;
  uint64_t seed = 0;  // the sample set's noise stream
};

class FidEvaluator {
 public:
  FidEvaluator(FidEvaluatorOptions options, dist::ProcessGroup& group, const LogLine& log = {});
  double evaluate(const GenerateImages& generate, const Shape& noise_shape);
  std::string line(const std::string& name, int64_t iteration, double value) const;

  const FidEvaluatorOptions& options() const { return options_; }
  const LoadedFeatureNet& network() const { return net_; }
  const GaussianStats& real() const { return real_; }

 private:
  FidEvaluatorOptions options_;
  dist::ProcessGroup& group_;
  LoadedFeatureNet net_;
  GaussianStats real_;
};

}  // namespace tandem::metrics
