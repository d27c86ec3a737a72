// Sample pictures: <dir>/samples-<iteration, zero-padded to 6 digits>.png, drawn from the
// generator with the moving average of its weights in place.
//
// Contract: write(i) draws kImageSamples (image models: a gray grid of kGridColumns
// columns, each tile scaled kGridScale times) or kRing8Samples (ring8: a scatter over the
// true modes, whose quality it also returns) samples from the same noise every time (a
// Generator seeded seed + kSampleNoiseSeed, so pictures of one run compare), with the
// generator in training mode as in the reference DCGAN loop (early in training batch
// norm's running statistics lag far behind the batch's). Sampling never changes the run:
// the parameters and buffers are bitwise what they were, and no graph is recorded.
// Returns the picture's path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "models/data/dataset.h"
#include "models/gan.h"
#include "models/training/ema_weights.h"
#include "runtime/device.h"

namespace tandem::models {

constexpr int64_t kImageSamples = 64;
constexpr int64_t kRing8Samples = 2500;
constexpr int64_t kGridColumns = 8;
constexpr int64_t kGridScale = 2;
constexpr uint64_t kSampleNoiseSeed = 4242;

std::string sample_path(const std::string& dir, int64_t iteration);

struct Samples {
  std::string path;
  std::optional<data::Ring8Quality> ring8;  // ring8 models only
};

class SampleWriter {
 public:
  SampleWriter(std::string dir, uint64_t seed, GanModel& model, const training::EmaWeights& ema,
               Device device);
  Samples write(int64_t iteration) const;

 private:
  std::string dir_;
  uint64_t seed_;
  GanModel& model_;
  const training::EmaWeights& ema_;
  Device device_;
};

}  // namespace tandem::models
