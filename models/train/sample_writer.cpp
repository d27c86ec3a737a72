#include "models/train/sample_writer.h"

#include <filesystem>
#include <iomanip>
#include <sstream>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "models/data/png_writer.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/rng.h"

namespace tandem::models {

std::string sample_path(const std::string& dir, int64_t iteration) {
  std::ostringstream name;
  name << "samples-" << std::setw(6) << std::setfill('0') << iteration << ".png";
  return (std::filesystem::path(dir) / name.str()).string();
}

SampleWriter::SampleWriter(std::string dir, uint64_t seed, GanModel& model, const training::EmaWeights& ema,
                           Device device)
    : dir_(std::move(dir)), seed_(seed), model_(model), ema_(ema), device_(device) {}

Samples SampleWriter::write(int64_t iteration) const {
  NoGradGuard no_grad;
  nn::LocalBatchStatsScope rank_alone;  // rank 0 alone draws: SyncBatchNorm must not wait for the others
  // Training mode updates batch norm's running statistics; they are put back afterwards.
  std::vector<std::pair<Tensor, Tensor>> saved_buffers;
  for (auto& [name, buffer] : model_.named_buffers()) saved_buffers.emplace_back(buffer, buffer.clone());
  const int64_t count = model_.is_image_model() ? kImageSamples : kRing8Samples;
  Tensor z = Tensor::empty({count, model_.noise_dim()}, DType::f32, device_);
  Generator gen(seed_ + kSampleNoiseSeed);
  fill_normal(z, 0.0, 1.0, gen);
  Tensor samples;
  {
    training::ScopedAverage average(ema_);
    samples = model_.generate(Variable(z)).data().to(Device::cpu());
  }
  for (auto& [buffer, copy] : saved_buffers) buffer.copy_(copy);

  Samples out;
  out.path = sample_path(dir_, iteration);
  if (model_.is_image_model()) {
    Shape shape = model_.sample_shape();
    shape.insert(shape.begin(), count);
    if (shape[1] == 3) {
      data::write_png_rgb_grid(out.path, samples.reshape(shape), kGridColumns, kGridScale);
    } else {
      data::write_png_gray_grid(out.path, samples.reshape(shape), kGridColumns, kGridScale);
    }
  } else {
    out.ring8 = data::ring8_quality(samples);
    data::write_ring8_scatter_png(out.path, samples, data::ring8_modes());
  }
  return out;
}

}  // namespace tandem::models
