#include "models/train/fid_monitor.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "autograd/grad_mode.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/fid.h"
#include "models/metrics/fid_eval.h"
#include "reducer/sync_batch_norm.h"

namespace tandem::models {

namespace {

// The noise of the FID sample set: a stream of its own, apart from the training noise.
constexpr uint64_t kFidNoiseSeed = 0xf1d0000000000000ull;

bool all_finite(const Tensor& t) {
  for (const double v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

void check_fid_options(const TrainOptions& o, const FlagGiven& given) {
  if (o.fid_every == 0) {
    if (given("--fid-samples")) throw UsageError("--fid-samples goes with --fid-every");
    if (given("--fid-cache")) throw UsageError("--fid-cache goes with --fid-every");
    return;
  }
  if (o.data != "fashion-mnist" || (o.model != "mlp" && o.model != "dcgan")) {
    throw UsageError(
        "--fid-every needs --data fashion-mnist and a model whose samples are 1-channel 28x28 "
        "images at every iteration (mlp, dcgan), not --model " +
        o.model + " on --data " + o.data);
  }
  if (o.fid_every % o.log_every != 0) {
    throw UsageError("--fid-every " + std::to_string(o.fid_every) + " must be a multiple of --log-every " +
                     std::to_string(o.log_every) + " (FID joins the log point's line)");
  }
}

FidMonitor::FidMonitor(const TrainOptions& o, dist::ProcessGroup& world, bool ema_on, std::ostream* out)
    : world_(world),
      every_(o.fid_every),
      samples_(o.fid_samples),
      seed_(o.seed ^ kFidNoiseSeed),
      name_(ema_on ? "fid_ema" : "fid") {
  const std::string cache = o.fid_cache.empty() ? metrics::default_fid_cache_dir() : o.fid_cache;
  auto log = [out](const std::string& line) {
    if (out != nullptr) *out << line << "\n" << std::flush;
  };
  const bool lead = world.rank() == 0;
  try {
    net_ = metrics::load_or_train_feature_net(o.data_dir, cache, metrics::FeatureNetConfig{}, world,
                                              lead ? metrics::LogLine(log) : metrics::LogLine());
  } catch (const Error& e) {
    TANDEM_FAIL("FID's feature network (--fid-cache " << cache << "): " << e.message());
  }
  const data::ImageDataset test = data::load_fashion_mnist(o.data_dir, false);
  real_ = metrics::real_stats(*net_.net, net_.hash, test, data::dataset_identity(test), cache, world,
                              lead ? metrics::LogLine(log) : metrics::LogLine());
  char text[240];
  std::snprintf(
      text, sizeof text,
      "%s: feature network %s (test accuracy %.2f%%), %lld samples every %lld iterations from the %s "
      "generator against %lld test images",
      name_.c_str(), metrics::short_hash(net_.hash).c_str(), 100.0 * net_.test_accuracy,
      static_cast<long long>(samples_), static_cast<long long>(every_), name_ == "fid" ? "live" : "EMA",
      static_cast<long long>(real_.count));
  log(text);
}

bool FidMonitor::due(int64_t done, bool last) const { return last || done % every_ == 0; }

double FidMonitor::compute(GanModel& model, const EmaWeights& ema, Device device) {
  NoGradGuard no_grad;
  nn::LocalBatchStatsScope local;  // ranks make different chunk counts: no batch-norm collectives
  std::vector<std::pair<Tensor, Tensor>> saved_buffers;
  for (auto& [name, buffer] : model.named_buffers()) saved_buffers.emplace_back(buffer, buffer.clone());
  metrics::GaussianStats stats;
  {
    ScopedAverage average(ema);
    auto generate = [&](const Tensor& noise) {
      const Tensor images = model.generate(Variable(noise.to(device))).data().to(Device::cpu());
      return images.reshape({noise.size(0), 1, 28, 28});
    };
    stats = metrics::generated_stats(*net_.net, generate, {model.noise_dim()}, samples_, seed_, world_);
  }
  for (auto& [buffer, copy] : saved_buffers) buffer.copy_(copy);
  // A generator gone non-finite has no FID, and the run is not ended for it (--on-nonfinite
  // decides that): the statistics are the allreduced sums, equal on every rank, so every
  // rank takes this branch together.
  if (!all_finite(stats.mean) || !all_finite(stats.cov)) return std::numeric_limits<double>::quiet_NaN();
  return metrics::fid(stats, real_);
}

std::string FidMonitor::line(int64_t iteration, double value) const {
  if (std::isnan(value))
    return name_ + ": non-finite samples at iteration " + std::to_string(iteration) +
           " (the generator's output is not finite: no FID, training goes on)";
  char text[160];
  std::snprintf(text, sizeof text, "%s %.4f at iteration %lld (features %s, %lld samples)", name_.c_str(),
                value, static_cast<long long>(iteration), metrics::short_hash(net_.hash).c_str(),
                static_cast<long long>(samples_));
  return text;
}

}  // namespace tandem::models
