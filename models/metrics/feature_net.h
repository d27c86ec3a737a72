// The feature network of tandem's FID: a small convnet classifier of 28x28 gray images
// (Fashion-MNIST), trained by tandem itself, whose penultimate activations are the features.
//
// Contract:
// - FeatureNet(seed): conv 1->32 3x3 pad 1, relu, 2x2 average pool, conv 32->64 3x3 pad 1,
//   relu, 2x2 average pool, linear 3136->128, relu, linear 128->10; weights drawn from a
//   Generator seeded `seed` (the same seed gives the same network everywhere).
//   forward(x) maps [N, 1, 28, 28] float32 in [-1, 1] to 10 logits, features(x) to the
//   kFeatureDim = 128 activations after the first linear layer's relu.
// - embed(net, images, batch, first_row) is features() of every row of `images`, in eval
//   mode without recording a graph: float32 [N, 128] on the net's device. Row i is global
//   row first_row + i of a sample set split over ranks, and is computed at place
//   (first_row + i) % batch of a batch of exactly `batch` rows: its features are bitwise the
//   same however the set is split (GEMM rounding may depend on a row's place and the batch
//   size), so FID at N ranks equals FID of one process to float64 summation order.
// - train_feature_net trains with Adam (lr, betas 0.9/0.999) for `epochs` passes over the
//   data in batches of `batch`, shuffled by a Philox stream of `seed`, on a one-vs-rest
//   logistic loss (bce_with_logits against one-hot labels, the recipe the cached networks
//   were trained with; the classifier's argmax is what is measured). Deterministic: the same data and config
//   give bitwise the same weights on one build and machine kind.
// - test_accuracy(net, data) is the fraction of rows whose argmax logit is their label.
// - feature_net_hash(data_identity, config) is 16 hex digits of a 64-bit FNV-1a hash of the
//   training data's identity (models/data/dataset_identity.h: a content hash), the
//   architecture description (kFeatureNetArchitecture) and the config; short_hash is its
//   first 8 digits, the form printed beside every FID.
// - load_or_train_feature_net(data_dir, cache_dir, config, group, log) is collective: every
//   rank of `group` gets the same network, as rank 0 decides from its view of the cache (a
//   cache per node, warm on one and cold on another, changes nothing). Rank 0 loads
//   "<cache_dir>/fid-features-<hash>.ckpt" (a safetensors file, runtime/checkpoint.h) when it
//   is present and verified: it must record this recipe's hash (fid.hash) and the hash of
//   the weights it holds (fid.weights, weights_hash), and numbers for its test accuracy and
//   training time. Otherwise rank 0 trains it on Fashion-MNIST's training set in `data_dir`
//   inside a LocalBackwardScope (no Reducer of the job counts those backwards), measures its
//   test accuracy and writes the file (save_feature_net); the other ranks wait for it, not
//   bounded by the collective timeout. Rank 0's outcome reaches them first: when training or
//   writing failed there, every rank throws at once, naming rank 0's error (with
//   kFeatureNetTrainingFaultEnv set in rank 0's environment the training fails on purpose:
//   the tests' way in). The weights then reach every rank by broadcast: the network is never
//   trained twice in a job. A file that fails verification is trained
//   again and replaced (logged, naming the file and what is wrong) where the cache is
//   writable, else an Error naming both; so is a missing file in a cache that cannot be
//   written, before any training. `log` (rank 0's) gets one line per epoch and one at the end.
//   The result's weights_id names the weights it holds (shipped_feature_net.h), whatever
//   recipe made them: two machines that train the same recipe to different weights print
//   different names.
// - save_feature_net writes the file with its identity (recipe hash, weights hash,
//   description, accuracy, training time) through a temporary of its own, so jobs sharing a
//   cache cannot undo each other's write (the last rename wins, whole).
// - check_cache_dir(dir) creates `dir` when missing; "" when it is a writable directory,
//   else why not.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "autograd/nn.h"
#include "models/data/dataset.h"
#include "runtime/dist/process_group.h"

namespace tandem::metrics {

constexpr int64_t kFeatureDim = 128;
constexpr const char* kFeatureNetArchitecture =
    "conv(1,32,3,p1) relu avgpool2 conv(32,64,3,p1) relu avgpool2 linear(3136,128) relu linear(128,10); "
    "loss bce-one-vs-rest; adam";

struct FeatureNetConfig {
  uint64_t seed = 1;
  int64_t epochs = 3;
  int64_t batch = 64;
  double lr = 1e-3;
  std::string describe() const;  // the architecture and every field
};

class FeatureNet : public nn::Module {
 public:
  explicit FeatureNet(uint64_t seed);
  Variable forward(const Variable& x) override;
  Variable features(const Variable& x);

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

using LogLine = std::function<void(const std::string&)>;

Tensor embed(FeatureNet& net, const Tensor& images, int64_t batch = 256, int64_t first_row = 0);
void train_feature_net(FeatureNet& net, const data::ImageDataset& train, const FeatureNetConfig& config,
                       const LogLine& log = {});
double test_accuracy(FeatureNet& net, const data::ImageDataset& data);

std::string feature_net_hash(const std::string& data_identity, const FeatureNetConfig& config);
std::string short_hash(const std::string& hash);
inline constexpr const char* kFeatureNetTrainingFaultEnv = "TANDEM_FAULT_FID_TRAINING";

std::string hash_hex(const std::string& key);  // 16 hex digits of FNV-1a (64 bits) of `key`

// Where the caches live unless told: $TANDEM_FID_CACHE, else $HOME/.cache/tandem/fid, else
// ".tandem-fid-cache".
std::string default_fid_cache_dir();

struct LoadedFeatureNet {
  std::shared_ptr<FeatureNet> net;
  std::string hash;        // 16 hex digits: the recipe's (the cache file's key)
  std::string weights_id;  // 16 hex digits of weights_sha256 (shipped_feature_net.h): its name
  std::string path;        // the cache file
  bool from_cache = false;
  double test_accuracy = 0.0;  // as recorded when it was trained
  double train_seconds = 0.0;  // likewise
};
LoadedFeatureNet load_or_train_feature_net(const std::string& data_dir, const std::string& cache_dir,
                                           const FeatureNetConfig& config, dist::ProcessGroup& group,
                                           const LogLine& log = {});
void save_feature_net(const LoadedFeatureNet& net, const FeatureNetConfig& config);
// Every state-dict entry in order: its name, a space, shape_str of its shape, a newline, then
// its bytes (host, contiguous). weights_hash is 16 hex digits of FNV-1a of it.
std::string weights_key(const nn::Module& net);
std::string weights_hash(const nn::Module& net);
// Loads out.path into out.net (and its recorded accuracy and time) when it verifies against
// out.hash as load_or_train_feature_net requires: "", else what is wrong.
std::string load_verified_feature_net(LoadedFeatureNet& out);
std::string check_cache_dir(const std::string& dir);

// One file of the FID cache as rank 0 found it, for follow_cache_verdict.
struct CacheFile {
  std::string dir{}, path{};
  std::string what{};  // names it in messages: "FID real statistics"
  bool present = false;
  std::string wrong{};  // "" when present and verified, else what is wrong with it
  std::string made{};   // "trained" / "computed": how it comes to be
  std::string redo{};   // "training it again": what a refusal leads to
};
// Collective: every rank follows rank 0's verdict on `file` (the other ranks' `file` is
// ignored). true: use the file. false: build it (rank 0 logs why a present file
// was refused). When it must be built and the cache cannot be written (check_cache_dir),
// an Error on every rank naming the file, what is wrong and why it cannot be rewritten.
bool follow_cache_verdict(dist::ProcessGroup& group, const CacheFile& file, const LogLine& log);

}  // namespace tandem::metrics
