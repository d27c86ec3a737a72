// An untrained FID feature network of FeatureNet(seed), saved in `cache` under the name that
// training the default recipe on Fashion-MNIST would give it: a loader or a run finds it
// there and loads it instead of training for minutes. Returns it, path and hash filled in.
// Reads Fashion-MNIST's training set (for its identity): call where fashion_mnist_present().
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "models/data/dataset.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/feature_net.h"

namespace tandem::testing {

// Whether Debian's dataset-fashion-mnist is installed (the tests that need it skip without).
inline bool fashion_mnist_present() {
  return std::filesystem::exists(std::filesystem::path(data::kFashionMnistDefaultDir) /
                                 "train-images-idx3-ubyte.gz");
}

inline metrics::LoadedFeatureNet plant_feature_net(const std::string& cache,
                                                   uint64_t seed = metrics::FeatureNetConfig{}.seed) {
  const metrics::FeatureNetConfig config;
  const data::ImageDataset train = data::load_fashion_mnist(data::kFashionMnistDefaultDir, true);
  metrics::LoadedFeatureNet planted;
  planted.net = std::make_shared<metrics::FeatureNet>(seed);
  planted.hash = metrics::feature_net_hash(data::dataset_identity(train), config);
  planted.path = cache + "/fid-features-" + planted.hash + ".ckpt";
  std::filesystem::create_directories(cache);
  metrics::save_feature_net(planted, config);
  return planted;
}

}  // namespace tandem::testing
