#include "models/metrics/feature_net.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/local_backward_scope.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/shipped_feature_net.h"
#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace tandem::metrics {

namespace {

constexpr int64_t kClasses = 10;

// How long the other ranks wait for rank 0 to train the network (about 2 minutes on 2 cores).
constexpr std::chrono::milliseconds kTrainingWait = std::chrono::hours(2);

// Rows `index[begin, begin + n)` of `images` (host float32 [N, ...]) as one batch.
Tensor gather_rows(const Tensor& images, const std::vector<int64_t>& index, int64_t begin, int64_t n) {
  Shape shape = images.shape();
  const int64_t row = images.numel() / shape[0];
  shape[0] = n;
  Tensor out = Tensor::empty(shape, DType::f32);
  const float* src = images.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * row, src + index[static_cast<size_t>(begin + i)] * row,
                static_cast<size_t>(row) * sizeof(float));
  }
  return out;
}

std::string fixed(double value, int digits) {
  std::ostringstream os;
  os.precision(digits);
  os << std::fixed << value;
  return os.str();
}

}  // namespace

std::string FeatureNetConfig::describe() const {
  std::ostringstream os;
  os << kFeatureNetArchitecture << "; seed " << seed << "; epochs " << epochs << "; batch " << batch
     << "; lr " << lr;
  return os.str();
}

FeatureNet::FeatureNet(uint64_t seed) {
  Generator gen(seed);
  conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, true, gen));
  conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1, true, gen));
  fc1_ = register_module("fc1", std::make_shared<nn::Linear>(64 * 7 * 7, kFeatureDim, true, gen));
  fc2_ = register_module("fc2", std::make_shared<nn::Linear>(kFeatureDim, kClasses, true, gen));
}

Variable FeatureNet::features(const Variable& x) {
  Variable h = avg_pool2x(relu(conv1_->forward(x)));
  h = avg_pool2x(relu(conv2_->forward(h)));
  return relu(fc1_->forward(flatten(h)));
}

Variable FeatureNet::forward(const Variable& x) { return fc2_->forward(features(x)); }

Tensor embed(FeatureNet& net, const Tensor& images, int64_t batch, int64_t first_row) {
  TANDEM_CHECK(images.dim() == 4 && images.size(1) == 1 && images.size(2) == 28 && images.size(3) == 28,
               "FID feature network: needs images [N, 1, 28, 28], got " << shape_str(images.shape()));
  TANDEM_CHECK(batch >= 1 && first_row >= 0, "embed: batch must be positive and first_row not negative");
  NoGradGuard no_grad;
  const bool was_training = net.is_training();
  net.eval();
  const int64_t n = images.size(0);
  Tensor out = Tensor::empty({n, kFeatureDim}, DType::f32, images.device());
  // Global row g is computed at position g % batch of a batch of exactly `batch` rows (the
  // rest zeros): a GEMM's rounding may depend on a row's place and the batch's size, and this
  // way neither depends on how the rows were split.
  Tensor chunk = Tensor::zeros({batch, 1, 28, 28}, DType::f32, images.device());
  for (int64_t i = 0; i < n;) {
    const int64_t position = (first_row + i) % batch;
    const int64_t rows = std::min(batch - position, n - i);
    chunk.zero_();
    chunk.narrow_rows(position, rows).copy_(images.narrow_rows(i, rows));
    const Tensor features = net.features(Variable(chunk)).data();
    Tensor part = out.narrow_rows(i, rows);
    part.copy_(features.narrow_rows(position, rows));
    i += rows;
  }
  net.train(was_training);
  return out;
}

void train_feature_net(FeatureNet& net, const data::ImageDataset& train, const FeatureNetConfig& config,
                       const LogLine& log) {
  TANDEM_CHECK(config.epochs >= 1 && config.batch >= 1,
               "FID feature network: epochs and batch must be positive");
  optim::Adam adam(net.parameters(), {.lr = config.lr});
  Generator shuffle(config.seed ^ 0x5fe17u);
  const int64_t n = train.size();
  std::vector<int64_t> order(static_cast<size_t>(n));
  net.train();
  for (int64_t epoch = 0; epoch < config.epochs; ++epoch) {
    for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates
      const auto j =
          std::min<int64_t>(i, static_cast<int64_t>(shuffle.uniform() * static_cast<double>(i + 1)));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
    double loss_sum = 0.0;
    int64_t steps = 0;
    for (int64_t begin = 0; begin + config.batch <= n; begin += config.batch) {
      const Tensor x = gather_rows(train.images, order, begin, config.batch);
      const std::vector<int64_t> rows(order.begin() + begin, order.begin() + begin + config.batch);
      const Variable target = one_hot(train.label_tensor(rows), kClasses);
      const Variable loss = mean(bce_with_logits(net.forward(Variable(x)), target));
      adam.zero_grad();
      loss.backward();
      adam.step();
      loss_sum += loss.data().item();
      ++steps;
    }
    if (log)
      log("FID feature network: epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config.epochs) +
          ", mean loss " + fixed(loss_sum / static_cast<double>(std::max<int64_t>(steps, 1)), 5));
  }
  net.eval();
}

double test_accuracy(FeatureNet& net, const data::ImageDataset& data) {
  NoGradGuard no_grad;
  net.eval();
  int64_t correct = 0;
  const int64_t n = data.size();
  for (int64_t begin = 0; begin < n; begin += 500) {
    const int64_t rows = std::min<int64_t>(500, n - begin);
    const Tensor logits =
        net.forward(Variable(data.images.narrow_rows(begin, rows))).data().to(Device::cpu());
    const float* p = logits.data<float>();
    for (int64_t i = 0; i < rows; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < kClasses; ++k) {
        if (p[i * kClasses + k] > p[i * kClasses + best]) best = k;
      }
      if (best == data.labels[static_cast<size_t>(begin + i)]) ++correct;
    }
  }
  return n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n);
}

std::string feature_net_hash(const std::string& data_identity, const FeatureNetConfig& config) {
  return hash_hex(data_identity + "\n" + config.describe());
}

std::string hash_hex(const std::string& key) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(h));
  return digits;
}

std::string short_hash(const std::string& hash) { return hash.substr(0, 8); }

std::string default_fid_cache_dir() {
  if (const char* dir = std::getenv("TANDEM_FID_CACHE"); dir != nullptr && *dir != '\0') return dir;
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/tandem/fid";
  }
  return ".tandem-fid-cache";
}

std::string weights_key(const nn::Module& net) {
  std::string key;
  for (const auto& [name, t] : net.state_dict()) {
    const Tensor host = t.to(Device::cpu()).clone();  // contiguous, on the host
    key += name + " " + shape_str(host.shape()) + "\n";
    key.append(static_cast<const char*>(host.raw_data()), host.bytes());
  }
  return key;
}

std::string weights_hash(const nn::Module& net) { return hash_hex(weights_key(net)); }

std::string check_cache_dir(const std::string& cache_dir) {
  std::error_code ec;
  const auto status = std::filesystem::status(cache_dir, ec);
  if (std::filesystem::exists(status)) {
    if (!std::filesystem::is_directory(status)) return cache_dir + " is not a directory";
  } else if (!std::filesystem::create_directories(cache_dir, ec) && ec) {
    return cache_dir + ": cannot create the directory (" + ec.message() + ")";
  }
  if (::access(cache_dir.c_str(), W_OK | X_OK) != 0)
    return cache_dir + " is not writable (" + std::strerror(errno) + ")";
  return "";
}

bool follow_cache_verdict(dist::ProcessGroup& group, const CacheFile& file, const LogLine& log) {
  bool use = false;
  std::string refusal;
  if (group.rank() == 0) {
    use = file.present && file.wrong.empty();
    if (!use) {
      const std::string unwritable = check_cache_dir(file.dir);
      if (!unwritable.empty()) {
        refusal = file.present
                      ? file.path + ": " + file.wrong + "; and the cache cannot be rewritten: " + unwritable
                      : "the FID cache lacks " + file.path + " and cannot hold it once " + file.made + ": " +
                            unwritable;
      } else if (file.present && log) {
        log(file.what + ": refusing " + file.path + ": " + file.wrong + "; " + file.redo);
      }
    }
  }
  // Rank 0's view of the cache decides: every rank follows, whatever its own file system holds.
  Tensor verdict = Tensor::from_values({2}, {use ? 1.0 : 0.0, refusal.empty() ? 0.0 : 1.0}, DType::i64);
  dist::broadcast_host(group, verdict, 0, "FID cache: rank 0's verdict");
  if (verdict.data<int64_t>()[1] != 0) {
    refusal = dist::broadcast_string(group, refusal, 0, "FID cache: rank 0's refusal");
    TANDEM_FAIL((group.rank() == 0 ? "" : "rank 0 found: ") << refusal);
  }
  return verdict.data<int64_t>()[0] != 0;
}

std::string load_verified_feature_net(LoadedFeatureNet& out) {
  SafetensorsFile file;
  try {
    file = load_safetensors(out.path);
    out.net->load_state_dict(file.tensors);
  } catch (const Error& e) {
    return std::string("not a FID feature network of this build: ") + e.what();
  }
  auto text = [&](const char* key) {
    const auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  if (text("fid.hash") != out.hash)
    return "it records the recipe " + (text("fid.hash").empty() ? std::string("(none)") : text("fid.hash")) +
           ", not " + out.hash + " (a file of another network, or of an older tandem)";
  if (const std::string weights = weights_hash(*out.net); text("fid.weights") != weights)
    return "its weights hash to " + weights + ", not the recorded " + text("fid.weights") +
           " (changed after it was written)";
  auto number = [&](const char* key, double& value) -> std::string {
    const std::string t = text(key);
    size_t used = 0;
    try {
      value = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != t.size() || !std::isfinite(value))
      return std::string("metadata key ") + key + " is '" + t + "', not a number";
    return "";
  };
  if (std::string e = number("fid.test_accuracy", out.test_accuracy); !e.empty()) return e;
  if (std::string e = number("fid.train_seconds", out.train_seconds); !e.empty()) return e;
  return "";
}

namespace {

enum class CacheDecision { load, train };

// A cache file is written in seconds (a few MB and an fsync); a temporary an hour old was
// left by a writer that was killed (remove_stale_temporaries, runtime/checkpoint.h).
constexpr std::chrono::hours kStaleTemporaryAge{1};

}  // namespace

void save_feature_net(const LoadedFeatureNet& net, const FeatureNetConfig& config) {
  save_safetensors(net.path, net.net->state_dict(),
                   {{"fid.description", config.describe()},
                    {"fid.hash", net.hash},
                    {"fid.weights", weights_hash(*net.net)},
                    {"fid.test_accuracy", fixed(net.test_accuracy, 6)},
                    {"fid.train_seconds", fixed(net.train_seconds, 3)}},
                   TemporaryName::unique);  // a cache other jobs may be writing too
}

LoadedFeatureNet load_or_train_feature_net(const std::string& data_dir, const std::string& cache_dir,
                                           const FeatureNetConfig& config, dist::ProcessGroup& group,
                                           const LogLine& log) {
  const bool lead = group.rank() == 0;
  LoadedFeatureNet out;
  out.net = std::make_shared<FeatureNet>(config.seed);
  std::optional<data::ImageDataset> train;
  CacheFile file{.dir = cache_dir, .made = "trained", .redo = "training it again"};
  if (lead) {
    for (const std::string& path : remove_stale_temporaries(cache_dir, "fid-", kStaleTemporaryAge))
      if (log) log("FID cache: removed " + path + " (left by a job that stopped while writing it)");
    train = data::load_fashion_mnist(data_dir, true);
    out.hash = feature_net_hash(data::dataset_identity(*train), config);
    out.path = cache_dir + "/fid-features-" + out.hash + ".ckpt";
    file.path = out.path;
    file.what = "FID feature network " + short_hash(out.hash);
    file.present = std::filesystem::exists(out.path);
    if (file.present) file.wrong = load_verified_feature_net(out);
    if (!file.wrong.empty()) out.net = std::make_shared<FeatureNet>(config.seed);  // not the refused weights
  }
  const CacheDecision decision =
      follow_cache_verdict(group, file, log) ? CacheDecision::load : CacheDecision::train;
  out.hash = dist::broadcast_string(group, out.hash, 0, "FID feature network: hash");
  out.path = dist::broadcast_string(group, out.path, 0, "FID feature network: path");
  const std::chrono::milliseconds timeout = group.host_group().timeout();
  std::string failure;  // rank 0's, when training or saving the network failed
  if (decision == CacheDecision::train && lead) {
    try {
      if (std::getenv(kFeatureNetTrainingFaultEnv) != nullptr)
        TANDEM_FAIL("training failed on purpose (" << kFeatureNetTrainingFaultEnv << " is set)");
      if (log) log("FID feature network " + short_hash(out.hash) + ": training (" + config.describe() + ")");
      const auto start = std::chrono::steady_clock::now();
      {
        LocalBackwardScope local;  // rank 0's alone: no Reducer of the job counts these backwards
        train_feature_net(*out.net, *train, config, log);
      }
      out.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      out.test_accuracy = test_accuracy(*out.net, data::load_fashion_mnist(data_dir, false));
      if (log) {
        log("FID feature network " + short_hash(out.hash) + ": test accuracy " +
            fixed(100.0 * out.test_accuracy, 2) + "%, trained in " + fixed(out.train_seconds, 1) + " s");
      }
      save_feature_net(out, config);
      if (log) log("FID feature network " + short_hash(out.hash) + ": wrote " + out.path);
    } catch (const std::exception& e) {
      failure = e.what();
    }
  } else if (decision == CacheDecision::load && lead && log) {
    log("FID feature network " + short_hash(out.hash) + ": loaded " + out.path);
  }
  // The other ranks wait here while rank 0 trains (minutes): as long as that takes. Rank 0's
  // outcome comes first, so that a failure there ends every rank at once, naming it.
  if (decision == CacheDecision::train) group.host_group().set_timeout(std::max(timeout, kTrainingWait));
  try {
    failure = dist::broadcast_string(group, failure, 0, "FID feature network: rank 0's training");
  } catch (...) {
    group.host_group().set_timeout(timeout);
    throw;
  }
  group.host_group().set_timeout(timeout);
  if (!failure.empty())
    TANDEM_FAIL("FID feature network " << short_hash(out.hash) << ": "
                                       << (lead ? "" : "rank 0 could not train it: ") << failure);
  Tensor recorded = Tensor::from_values({2}, {out.test_accuracy, out.train_seconds}, DType::f64);
  dist::broadcast_host(group, recorded, 0, "FID feature network: its accuracy and training time");
  out.test_accuracy = recorded.data<double>()[0];
  out.train_seconds = recorded.data<double>()[1];
  for (auto& [name, t] : out.net->state_dict()) {
    Tensor host = t;  // a handle on the weights: the broadcast writes them
    dist::broadcast_host(group, host, 0, "FID feature network: " + name);
  }
  out.net->eval();
  out.from_cache = decision == CacheDecision::load;
  out.weights_id = weights_sha256(*out.net).substr(0, 16);
  return out;
}

}  // namespace tandem::metrics
