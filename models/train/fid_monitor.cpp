#include "models/train/fid_monitor.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
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

// The feature network takes 1-channel 28x28 images. Larger samples (dcgan64's 64x64) are
// halved by StyleGAN2's [1, 3, 3, 1] filter while at least twice that side (64 -> 32), then
// resized bilinearly (32 -> 28): low-passed first, so the resize does not alias.
Tensor at_feature_size(Variable images, int64_t n, ResamplingFilter& blur) {
  if (images.dim() != 4 || (images.size(2) == 28 && images.size(3) == 28))
    return images.data().reshape({n, 1, 28, 28});
  const Tensor& filter = blur(images);
  while (images.size(2) >= 56 && images.size(3) >= 56 && images.size(2) % 2 == 0 && images.size(3) % 2 == 0)
    images = downsample2d(images, filter);
  return interpolate_bilinear(images, 28, 28).data();
}

}  // namespace

void check_fid_options(const TrainOptions& o, const FlagGiven& given) {
  if (o.fid_every == 0) {
    if (given("--fid-samples")) throw UsageError("--fid-samples goes with --fid-every");
    if (given("--fid-cache")) throw UsageError("--fid-cache goes with --fid-every");
    return;
  }
  const bool fixed_images = o.model == "mlp" || o.model == "dcgan" || o.model == "dcgan64" ||
                            o.model == "r3gan" || o.model == "stylegan2";
  if (o.data != "fashion-mnist" || !fixed_images || o.channels != 1) {
    throw UsageError(
        "--fid-every needs --data fashion-mnist and a model whose samples are 1-channel images of one "
        "size at every iteration (mlp, dcgan, dcgan64, r3gan, stylegan2; dcgan64's are resized to 28x28), "
        "not --model " +
        o.model + " on --data " + o.data + (o.channels != 1 ? " with --channels 3" : ""));
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
  try {
    real_ = metrics::real_stats(*net_.net, net_.hash, test, data::dataset_identity(test), cache, world,
                                lead ? metrics::LogLine(log) : metrics::LogLine());
  } catch (const Error& e) {
    TANDEM_FAIL("FID's real statistics (--fid-cache " << cache << "): " << e.message());
  }
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
  if (std::getenv(kFidFaultEnv) != nullptr)
    TANDEM_FAIL(name_ << " failed on purpose (" << kFidFaultEnv << " is set)");
  NoGradGuard no_grad;
  nn::LocalBatchStatsScope local;  // ranks make different chunk counts: no batch-norm collectives
  std::vector<std::pair<Tensor, Tensor>> saved_buffers;
  for (auto& [name, buffer] : model.named_buffers()) saved_buffers.emplace_back(buffer, buffer.clone());
  metrics::GaussianStats stats;
  {
    ScopedAverage average(ema);
    auto generate = [&](const Tensor& noise) {
      return at_feature_size(model.generate(Variable(noise.to(device))), noise.size(0), blur_)
          .to(Device::cpu());
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
