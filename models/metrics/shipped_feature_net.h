// The FID feature network tandem ships, so that an FID printed on one machine compares with
// one printed on another, and no machine spends minutes training it: FeatureNet's weights
// trained once by tandem with the default recipe (FeatureNetConfig{}: Adam, 3 epochs, batch
// 64, seed 1) on Fashion-MNIST's training set, test accuracy 90.37 %, committed as
// models/metrics/fid_features.safetensors (421,642 float32 weights, 1,687,520 bytes) and
// installed as <prefix>/share/tandem/fid_features.safetensors.
//
// Contract:
// - weights_sha256(net): the SHA-256 (runtime/sha256.h) of weights_key(net) (feature_net.h:
//   every state-dict entry's name, shape and bytes); 64 hex digits. A network is named by it (the first 16
//   digits: LoadedFeatureNet::weights_id; 8 are printed beside every FID): the same name means the same
//   weights, whatever recipe or machine made them.
// - kShippedFeatureNetSha256 is the shipped weights' weights_sha256.
// - shipped_feature_net_path(): $TANDEM_FID_NETWORK when set (not empty), else the installed
//   file when it exists, else share/tandem/ beside the running program's bin/ (an
//   installation moved with cmake --install --prefix), else the source tree's.
// - load_shipped_feature_net(path) loads the file (load_safetensors: its header and CRC),
//   copies it into a FeatureNet (load_state_dict: every entry present, of its shape), and
//   checks that the weights' SHA-256 is kShippedFeatureNetSha256: each failure an Error
//   starting with the path and saying what is wrong, so a changed byte is refused by name.
//   The result's path is `path`, hash and weights_id the SHA-256's first 16 digits,
//   test_accuracy and train_seconds as the file records them. Every rank loads it itself
//   (no collective): the file is part of the installation on every node.
#pragma once

#include <string>

#include "autograd/module.h"
#include "models/metrics/feature_net.h"

namespace tandem::metrics {

inline constexpr const char* kShippedFeatureNetSha256 =
    "6aca585d05c9572a8bd8db8dc68a0cd6c19ce01fa6f44da7a9b9c610e1c001b8";
inline constexpr const char* kFeatureNetFileEnv = "TANDEM_FID_NETWORK";

std::string weights_sha256(const nn::Module& net);
std::string shipped_feature_net_path();
LoadedFeatureNet load_shipped_feature_net(const std::string& path);

}  // namespace tandem::metrics
