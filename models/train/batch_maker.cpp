#include "models/train/batch_maker.h"

#include <algorithm>
#include <chrono>

#include "models/data/dataset_identity.h"
#include "models/data/image_folder.h"
#include "models/data/image_resize.h"
#include "runtime/error.h"

namespace tandem::models {

namespace {

// The Philox key of one purpose's draws: the streams of data, noise and mixing never meet.
uint64_t stream_key(uint64_t seed, uint64_t purpose) {
  return seed * 0x9E3779B97F4A7C15ull ^ purpose * 0x94D049BB133111EBull;
}

}  // namespace

Generator global_stream(uint64_t seed, int64_t iteration, uint64_t purpose) {
  return iteration_stream(stream_key(seed, purpose), iteration);
}

BatchMaker::BatchMaker(const BatchSpec& spec) : spec_(spec) {}

BatchMaker::BatchMaker(const BatchSpec& spec, data::ImageDataset images)
    : spec_(spec),
      images_(std::move(images)),
      data_identity_(data::dataset_identity(images_)),
      sampler_(std::make_unique<data::DistributedSampler>(images_.size(), spec.world_size, spec.rank,
                                                          spec.batch, spec.seed)) {}

LabeledBatch BatchMaker::make(int64_t iteration) const {
  LabeledBatch batch;
  const int64_t global_rows = spec_.batch * spec_.world_size, first_row = spec_.batch * spec_.rank;
  if (sampler_) {
    int64_t per_epoch = sampler_->batches_per_epoch();
    data::SampledBatch rows = sampler_->batch(images_, iteration / per_epoch, iteration % per_epoch);
    batch.inputs = std::move(rows.images);
    batch.labels = std::move(rows.labels);
    if (spec_.side > 0 && batch.inputs.size(2) != spec_.side)
      batch.inputs = data::resize_images(batch.inputs, spec_.side);
  } else {  // this rank's rows of the global draw
    Generator data_gen = global_stream(spec_.seed, iteration, kDataStream);
    data::Ring8Draw draw = data::make_ring8_labeled(global_rows, data_gen);
    batch.inputs = draw.points.narrow_rows(first_row, spec_.batch).clone();
    batch.labels = draw.labels.narrow_rows(first_row, spec_.batch).clone();
  }
  if (spec_.device.is_cuda()) {
    batch.inputs = batch.inputs.to(spec_.device);
    batch.labels = batch.labels.to(spec_.device);
  }
  batch.targets = randn_global_rows({spec_.batch, spec_.noise_dim}, stream_key(spec_.seed, kNoiseStream),
                                    iteration, spec_.rank, spec_.world_size)
                      .to(spec_.device);
  Tensor mix = Tensor::empty({global_rows});
  Generator mix_gen = global_stream(spec_.seed, iteration, kMixStream);
  fill_uniform(mix, 0.0, 1.0, mix_gen);
  batch.aux = mix.narrow_rows(first_row, spec_.batch).to(spec_.device);
  return batch;
}

namespace {

data::ImageDataset load_images(const TrainOptions& o, const Shape& data_shape, std::ostream* log) {
  TANDEM_CHECK(data_shape.size() == 3 && data_shape[1] == data_shape[2],
               "--data images: --model " << o.model << " does not take square pictures");
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last_line = start;
  data::ImageFolderOptions options{.channels = static_cast<int>(data_shape[0]),
                                   .side = data_shape[1],
                                   .skip_bad = o.skip_bad_images,
                                   .max_side = o.max_image_side};
  if (log != nullptr) {
    options.progress = [&](int64_t done, int64_t total) {
      const auto now = Clock::now();
      if (now - last_line < std::chrono::seconds(2) || done == total) return;
      last_line = now;
      *log << "loading images from " << o.data_dir << ": " << done << " of " << total << " files"
           << std::endl;
    };
  }
  data::ImageFolder folder = data::load_image_folder(o.data_dir, options);
  if (log != nullptr) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    *log << "loaded " << folder.files.size() << " images from " << o.data_dir << " as " << data_shape[0]
         << "x" << data_shape[1] << "x" << data_shape[2] << " in " << static_cast<int64_t>(seconds * 1000)
         << " ms\n";
    if (!folder.skipped.empty()) {
      *log << "--skip-bad-images: left out " << folder.skipped.size() << " of "
           << folder.skipped.size() + folder.files.size() << " files; the first: " << folder.skipped.front()
           << "\n";
    }
  }
  return std::move(folder.dataset);
}

}  // namespace

BatchMaker make_batch_maker(const TrainOptions& o, int world_size, int rank, int64_t noise_dim, Device device,
                            const Shape& data_shape, std::ostream* log) {
  const BatchSpec spec{.seed = o.seed,
                       .world_size = world_size,
                       .rank = rank,
                       .batch = o.batch,
                       .noise_dim = noise_dim,
                       .device = device,
                       .side = data_shape.size() == 3 ? data_shape[1] : 0};
  if (o.data == "ring8") return BatchMaker(spec);
  data::ImageDataset images =
      o.data == "images" ? load_images(o, data_shape, log) : data::load_fashion_mnist(o.data_dir, true);
  if (o.data_fraction < 1) {  // the first rows: the same subset whatever the number of ranks
    const int64_t keep = std::max<int64_t>(1, static_cast<int64_t>(o.data_fraction * images.size()));
    images.images = images.images.narrow_rows(0, keep).clone();
    images.labels.resize(static_cast<size_t>(keep));
  }
  // The sampler says why the data cannot feed every rank a batch; this adds which data and flags.
  try {
    return BatchMaker(spec, std::move(images));
  } catch (const Error& e) {
    TANDEM_FAIL("--data " << o.data << " from --data-dir " << o.data_dir << " cannot feed --batch " << o.batch
                          << " on " << world_size << " rank(s): " << e.message()
                          << ". Lower --batch or start fewer ranks (mpirun -np)");
  }
}

}  // namespace tandem::models
