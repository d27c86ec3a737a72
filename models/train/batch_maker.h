// The batch of iteration i on rank r: rank r's rows of the global batch of iteration i,
// which depends only on (seed, i) and the global batch size, so a resumed run draws exactly
// what an uninterrupted one would have, and so does one resumed at another number of ranks
// with the same global batch (W ranks at `batch` rows each: W * batch rows).
//
// Contract:
// - global_stream(seed, iteration, purpose) is the Generator of the global batch's draws for
//   one purpose: iteration_stream (runtime/rng.h) keyed by (seed, purpose); purpose
//   kDataStream draws ring8 points, kNoiseStream the noise, kMixStream the interpolation
//   coefficients.
// - make(i) returns inputs (this rank's real data), targets (the generator's noise,
//   float32 [batch, noise_dim] standard normals: this rank's rows of the global draw,
//   randn_global_rows of the noise stream) and aux (float32 [batch] uniforms in [0, 1):
//   rows [rank * batch, (rank + 1) * batch) of world_size * batch uniforms from the mix
//   stream; the coefficients of WGAN-GP's interpolates), all on `device`. Real data: for
//   ring8, the same rows of world_size * batch points drawn with data::make_ring8 from the
//   data stream; for an image dataset, the rows the
//   DistributedSampler (world_size, rank, batch, seed) gives this rank at step
//   i % batches_per_epoch of epoch i / batches_per_epoch (the global step's positions are
//   those of the global batch, whatever the rank count), resized to side x side
//   (data::resize_images) when `side` is set and the pictures have another size (Fashion-MNIST's
//   28x28 for dcgan64's 64x64). make() keeps no state from call to call: any i can be drawn first.
//   So W ranks' batches, concatenated in rank order, are bitwise the batch of one process at
//   W * batch rows.
// - make(i) also returns labels, int64 [batch] on `device`: row k is the label of the sample
//   in row k of inputs (ring8: its mode 0..7; images: the dataset's label of the sampled row).
//   A LabeledBatch is a Batch: code that takes a Batch sees the same inputs, targets and aux
//   as before, the labels unused (drawing them takes nothing from any random stream).
// - data_identity() is "" for ring8 (drawn from the seed) and data::dataset_identity of
//   the images otherwise (their count, shape and a content hash), computed once.
// - An image dataset too small for `batch` on every rank is an Error from the constructor
//   (the sampler's); make_batch_maker, which loads --data from --data-dir, adds the data,
//   the flags and what to do about it.
// - --data images: make_batch_maker loads the folder --data-dir once (models/data/image_folder.h)
//   at the model's data_shape ([C, side, side]; --skip-bad-images leaves bad files out).
//   With `log` set (rank 0) it writes a progress line every 2 s of a long load, the count
//   of images loaded, and the count of files left out with the first reason, once.
// - --data-fraction f < 1 keeps the first max(1, floor(f * N)) images of an image dataset
//   (the same subset at any number of ranks; its data_identity is the subset's).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "models/data/dataset.h"
#include "models/data/sampler.h"
#include "models/train/train_options.h"
#include "reducer/ddp.h"
#include "runtime/device.h"
#include "runtime/rng.h"

namespace tandem::models {

constexpr uint64_t kDataStream = 1;
constexpr uint64_t kNoiseStream = 2;
constexpr uint64_t kMixStream = 3;

Generator global_stream(uint64_t seed, int64_t iteration, uint64_t purpose);

struct BatchSpec {
  uint64_t seed = 0;
  int world_size = 1;
  int rank = 0;
  int64_t batch = 64;  // per rank
  int64_t noise_dim = 0;
  Device device = Device::cpu();
  int64_t side = 0;  // images: the model's side; 0: as stored
};

struct LabeledBatch : Batch {
  Tensor labels;  // int64 [batch]
};

class BatchMaker {
 public:
  // ring8: points drawn fresh every iteration.
  explicit BatchMaker(const BatchSpec& spec);
  // Rows of `images`, sharded over the ranks.
  BatchMaker(const BatchSpec& spec, data::ImageDataset images);

  LabeledBatch make(int64_t iteration) const;
  const std::string& data_identity() const { return data_identity_; }

 private:
  BatchSpec spec_;
  data::ImageDataset images_;
  std::string data_identity_;
  std::unique_ptr<data::DistributedSampler> sampler_;
};

// The batch maker of --data for rank `rank` of `world_size` (seed and batch from the options;
// pictures at data_shape's side).
BatchMaker make_batch_maker(const TrainOptions& options, int world_size, int rank, int64_t noise_dim,
                            Device device, const Shape& data_shape = {1, 28, 28},
                            std::ostream* log = nullptr);

}  // namespace tandem::models
