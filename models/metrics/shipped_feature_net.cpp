#include "models/metrics/shipped_feature_net.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/sha256.h"

namespace tandem::metrics {

std::string weights_sha256(const nn::Module& net) { return sha256_hex(weights_key(net)); }

std::string shipped_feature_net_path() {
  if (const char* env = std::getenv(kFeatureNetFileEnv); env != nullptr && *env != '\0') return env;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(TANDEM_FID_NETWORK_INSTALLED, ec)) return TANDEM_FID_NETWORK_INSTALLED;
  // An installation moved elsewhere (cmake --install --prefix): beside the program's bin/.
  const fs::path program = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path beside = program.parent_path().parent_path() / "share/tandem/fid_features.safetensors";
    if (fs::exists(beside, ec)) return beside.string();
  }
  return TANDEM_FID_NETWORK_SOURCE;
}

LoadedFeatureNet load_shipped_feature_net(const std::string& path) {
  LoadedFeatureNet out;
  out.path = path;
  out.net = std::make_shared<FeatureNet>(FeatureNetConfig{}.seed);
  SafetensorsFile file;
  try {
    file = load_safetensors(path);
  } catch (const Error& e) {  // its message starts with the path
    TANDEM_FAIL("FID's shipped feature network: " << e.message());
  }
  try {
    out.net->load_state_dict(file.tensors);
  } catch (const Error& e) {
    TANDEM_FAIL(path << ": not FID's feature network: " << e.message());
  }
  const std::string sha = weights_sha256(*out.net);
  TANDEM_CHECK(sha == kShippedFeatureNetSha256,
               path << ": its weights' SHA-256 is " << sha << ", not the shipped network's "
                    << kShippedFeatureNetSha256
                    << ": the file was changed (restore it from tandem's sources, "
                       "models/metrics/fid_features.safetensors)");
  out.hash = out.weights_id = sha.substr(0, 16);
  out.net->eval();
  auto number = [&](const char* key) {
    const auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::nan("") : std::strtod(it->second.c_str(), nullptr);
  };
  out.test_accuracy = number("fid.test_accuracy");
  out.train_seconds = number("fid.train_seconds");
  return out;
}

}  // namespace tandem::metrics
