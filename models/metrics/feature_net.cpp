#include "models/metrics/feature_net.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "models/data/dataset_identity.h"
#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace tandem::metrics {

namespace {

constexpr int64_t kClasses = 10;

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

LoadedFeatureNet load_or_train_feature_net(const std::string& data_dir, const std::string& cache_dir,
                                           const FeatureNetConfig& config, bool write, const LogLine& log) {
  const data::ImageDataset train = data::load_fashion_mnist(data_dir, true);
  LoadedFeatureNet out;
  out.net = std::make_shared<FeatureNet>(config.seed);
  out.hash = feature_net_hash(data::dataset_identity(train), config);
  out.path = cache_dir + "/fid-features-" + out.hash + ".ckpt";
  if (std::filesystem::exists(out.path)) {
    const SafetensorsFile file = load_safetensors(out.path);
    try {
      out.net->load_state_dict(file.tensors);
    } catch (const Error& e) {
      TANDEM_FAIL(out.path << ": not a FID feature network of this build: " << e.what());
    }
    out.net->eval();
    out.from_cache = true;
    auto recorded = [&](const char* key) {
      const auto it = file.metadata.find(key);
      if (it == file.metadata.end()) return 0.0;
      size_t used = 0;
      double value = 0;
      try {
        value = std::stod(it->second, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      TANDEM_CHECK(used == it->second.size() && used > 0,
                   out.path << ": metadata key " << key << " is '" << it->second << "', not a number");
      return value;
    };
    out.test_accuracy = recorded("fid.test_accuracy");
    out.train_seconds = recorded("fid.train_seconds");
    if (log) log("FID feature network " + short_hash(out.hash) + ": loaded " + out.path);
    return out;
  }
  if (log) log("FID feature network " + short_hash(out.hash) + ": training (" + config.describe() + ")");
  const auto start = std::chrono::steady_clock::now();
  train_feature_net(*out.net, train, config, log);
  out.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.test_accuracy = test_accuracy(*out.net, data::load_fashion_mnist(data_dir, false));
  if (log) {
    log("FID feature network " + short_hash(out.hash) + ": test accuracy " +
        fixed(100.0 * out.test_accuracy, 2) + "%, trained in " + fixed(out.train_seconds, 1) + " s");
  }
  if (write) {
    std::filesystem::create_directories(cache_dir);
    save_safetensors(out.path, out.net->state_dict(),
                     {{"fid.description", config.describe()},
                      {"fid.test_accuracy", fixed(out.test_accuracy, 6)},
                      {"fid.train_seconds", fixed(out.train_seconds, 3)}});
    if (log) log("FID feature network " + short_hash(out.hash) + ": wrote " + out.path);
  }
  return out;
}

}  // namespace tandem::metrics
