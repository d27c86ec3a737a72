#include "models/train/fid_monitor.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "reducer/sync_batch_norm.h"

namespace tandem::models {

namespace {

// The noise of the FID sample set: a stream of its own, apart from the training noise.
constexpr uint64_t kFidNoiseSeed = 0xf1d0000000000000ull;

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
    if (given("--fid-network")) throw UsageError("--fid-network goes with --fid-every");
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
    : every_(o.fid_every), name_(ema_on ? "fid_ema" : "fid") {
  auto log = [out](const std::string& line) {
    if (out != nullptr) *out << line << "\n" << std::flush;
  };
  const std::string cache = o.fid_cache.empty() ? metrics::default_fid_cache_dir() : o.fid_cache;
  try {
    evaluator_ = std::make_unique<metrics::FidEvaluator>(
        metrics::FidEvaluatorOptions{.network = o.fid_network == "train" ? metrics::FeatureNetSource::train
                                                                         : metrics::FeatureNetSource::shipped,
                                     .data_dir = o.data_dir,
                                     .cache = cache,
                                     .samples = o.fid_samples,
                                     .seed = o.seed ^ kFidNoiseSeed},
        world, world.rank() == 0 ? metrics::LogLine(log) : metrics::LogLine());
  } catch (const Error& e) {  // its message names the cache folder; the flag is named here
    TANDEM_FAIL("--fid-cache " << cache << ": " << e.message());
  }
  char text[240];
  std::snprintf(
      text, sizeof text,
      "%s: feature network %s (test accuracy %.2f%%), %lld samples every %lld iterations from the %s "
      "generator against %lld test images",
      name_.c_str(), metrics::short_hash(evaluator_->network().weights_id).c_str(),
      100.0 * evaluator_->network().test_accuracy, static_cast<long long>(o.fid_samples),
      static_cast<long long>(every_), name_ == "fid" ? "live" : "EMA",
      static_cast<long long>(evaluator_->real().count));
  log(text);
}

FidMonitor::~FidMonitor() = default;

bool FidMonitor::due(int64_t done, bool last) const { return last || done % every_ == 0; }

double FidMonitor::compute(GanModel& model, const training::EmaWeights& ema, Device device) {
  if (std::getenv(kFidFaultEnv) != nullptr)
    TANDEM_FAIL(name_ << " failed on purpose (" << kFidFaultEnv << " is set)");
  NoGradGuard no_grad;
  nn::LocalBatchStatsScope local;  // ranks make different chunk counts: no batch-norm collectives
  std::vector<std::pair<Tensor, Tensor>> saved_buffers;
  for (auto& [name, buffer] : model.named_buffers()) saved_buffers.emplace_back(buffer, buffer.clone());
  double value = 0;
  {
    training::ScopedAverage average(ema);
    auto generate = [&](const Tensor& noise) {
      return at_feature_size(model.generate(Variable(noise.to(device))), noise.size(0), blur_)
          .to(Device::cpu());
    };
    value = evaluator_->evaluate(generate, {model.noise_dim()});
  }
  for (auto& [buffer, copy] : saved_buffers) buffer.copy_(copy);
  return value;
}

std::string FidMonitor::line(int64_t iteration, double value) const {
  return evaluator_->line(name_, iteration, value);
}

}  // namespace tandem::models
