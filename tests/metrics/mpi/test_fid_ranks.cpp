// FID across ranks equals FID of one process on the same samples (to 1e-9 relative), for
// a fixed (untrained, deterministic) feature network: real rows split over ranks, generated
// rows from global noise, and the cached real statistics.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../../mpi_world.h"
#include "../../test_files.h"
#include "../plant_feature_net.h"
#include "models/data/dataset.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/feature_net.h"
#include "models/metrics/fid.h"
#include "models/metrics/fid_eval.h"
#include "runtime/checkpoint.h"
#include "runtime/rng.h"

using namespace tandem;
using namespace tandem::metrics;

namespace {

constexpr double kRelative = 1e-9;

GaussianStats one_process(FeatureNet& net, const Tensor& rows) {
  FeatureStats stats(kFeatureDim);
  stats.add(embed(net, rows, kEmbedBatch));
  return stats.gaussian();
}

void check_close(const Tensor& a, const Tensor& b) {
  const auto va = a.to_vector(), vb = b.to_vector();
  REQUIRE(va.size() == vb.size());
  double scale = 0.0;
  for (double v : vb) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < va.size(); ++i) REQUIRE(std::abs(va[i] - vb[i]) <= kRelative * scale);
}

// A stand-in generator whose images depend on the whole batch, as batch norm in training
// mode makes them: each noise value less its batch's mean, through a fixed smooth map.
Tensor fake_generator(const Tensor& noise) {
  const int64_t b = noise.size(0), z = noise.size(1);
  const float* p = noise.data<float>();
  std::vector<float> mean(static_cast<size_t>(z), 0.0f);
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < z; ++k) mean[static_cast<size_t>(k)] += p[i * z + k] / static_cast<float>(b);
  Tensor out = Tensor::empty({b, 1, 28, 28});
  float* o = out.data<float>();
  for (int64_t i = 0; i < b; ++i)
    for (int64_t k = 0; k < 784; ++k)
      o[i * 784 + k] =
          std::tanh((p[i * z + k % z] - mean[static_cast<size_t>(k % z)]) * (1.0f + 0.01f * (k / z)));
  return out;
}

Tensor scaled(const Tensor& x, double s) {
  Tensor out = x.clone();
  float* p = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) p[i] = static_cast<float>(s * p[i]);
  return out;
}

}  // namespace

TEST_CASE("FID of rows split over ranks equals one process's", "[metrics][mpi]") {
  auto group = testing::world();
  FeatureNet net(7);
  const int64_t n = 203;  // not a multiple of 2, 3 or 4
  const Tensor all = randn_rows({n, 1, 28, 28}, 0, 41, 0);
  // The other set is spread wider, so that FID is of the size of the covariances' traces:
  // FID is their difference, and relative agreement is only meaningful where it does not
  // cancel to a small remainder (square roots of near-zero eigenvalues amplify rounding).
  Tensor other = randn_rows({n, 1, 28, 28}, 0, 42, 0);
  other.copy_(scaled(other, 3.0));
  const auto [begin, end] = shard_rows(n, group->rank(), group->size());
  const GaussianStats split = sharded_stats(net, all.narrow_rows(begin, end - begin), begin, *group, "test");
  const GaussianStats whole = one_process(net, all);
  REQUIRE(split.count == n);
  check_close(split.mean, whole.mean);
  check_close(split.cov, whole.cov);
  const GaussianStats reference = one_process(net, other);
  const double expected = fid(whole, reference);
  INFO("FID " << expected << " at 1 process, " << fid(split, reference) << " at " << group->size()
              << " ranks");
  REQUIRE(expected > 0.0);
  CHECK(fid(split, reference) == Approx(expected).epsilon(kRelative));
}

TEST_CASE("FID of generated samples does not depend on the rank count", "[metrics][mpi]") {
  auto group = testing::world();
  FeatureNet net(8);
  const int64_t n = 101, z = 16;
  const uint64_t seed = 77;
  const GaussianStats split = generated_stats(net, fake_generator, {z}, n, seed, *group, 10);
  // One process: the same noise, generated in the same chunks of 10 rows.
  const Tensor noise = randn_rows({n, z}, 0, seed, 0);
  Tensor images = Tensor::empty({n, 1, 28, 28});
  for (int64_t c = 0; c < n; c += 10) {
    const int64_t len = std::min<int64_t>(10, n - c);
    images.narrow_rows(c, len).copy_(fake_generator(noise.narrow_rows(c, len)));
  }
  const GaussianStats whole = one_process(net, images);
  REQUIRE(split.count == n);
  check_close(split.mean, whole.mean);
  check_close(split.cov, whole.cov);
  const GaussianStats reference = one_process(net, scaled(randn_rows({160, 1, 28, 28}, 0, 43, 0), 3.0));
  INFO("FID " << fid(whole, reference) << " at 1 process, " << fid(split, reference) << " at "
              << group->size() << " ranks");
  CHECK(fid(split, reference) == Approx(fid(whole, reference)).epsilon(kRelative));
}

TEST_CASE("real statistics are computed once, cached, and read back equal", "[metrics][mpi]") {
  auto group = testing::world();
  FeatureNet net(9);
  data::ImageDataset real;
  real.images = randn_rows({50, 1, 28, 28}, 0, 44, 0);
  real.labels.assign(50, 0);
  // One directory for all ranks: rank 0's name.
  testing::TempDir dir("fid_cache");
  const std::string cache = dist::broadcast_string(*group, dir.path.string(), 0, "test: cache dir");
  const GaussianStats first = real_stats(net, "0123456789abcdef", real, "synthetic 50", cache, *group);
  const GaussianStats whole = one_process(net, real.images);
  check_close(first.cov, whole.cov);
  size_t files = 0;
  if (group->rank() == 0) {
    for (const auto& entry : std::filesystem::directory_iterator(cache)) {
      CHECK(entry.path().filename().string().rfind("fid-real-", 0) == 0);
      ++files;
    }
    CHECK(files == 1);
  }
  const GaussianStats second = real_stats(net, "0123456789abcdef", real, "synthetic 50", cache, *group);
  CHECK(second.count == first.count);
  CHECK(second.mean.to_vector() == first.mean.to_vector());
  CHECK(second.cov.to_vector() == first.cov.to_vector());
  group->barrier()->wait();  // rank 0's directory outlives the others' reads
}

TEST_CASE("a real-statistics file that does not verify is named, computed again and replaced",
          "[metrics][mpi]") {
  auto group = testing::world();
  FeatureNet net(9), other(10);
  data::ImageDataset real;
  real.images = randn_rows({50, 1, 28, 28}, 0, 45, 0);
  real.labels.assign(50, 0);
  testing::TempDir dir("fid_cache_bad");
  const std::string cache = dist::broadcast_string(*group, dir.path.string(), 0, "test: cache dir");
  const std::string net_hash = "0123456789abcdef", identity = "synthetic 50";
  const std::string path = cache + "/fid-real-" + hash_hex(net_hash + "\n" + identity) + ".ckpt";
  const GaussianStats good = real_stats(net, net_hash, real, identity, cache, *group);
  const std::string weights = weights_hash(net);
  const int64_t d = kFeatureDim;
  struct Case {
    std::string what;  // how the file is spoiled
    std::function<void(SafetensorsFile&)> spoil;
    std::string reason;  // what the refusal must say
  };
  const std::vector<Case> cases = {
      {"another network's statistics",
       [&](SafetensorsFile& f) { f.metadata["fid.feature_weights"] = weights_hash(other); },
       "made with the feature network of weights " + weights_hash(other) + ", not " + weights},
      {"another data set's", [](SafetensorsFile& f) { f.metadata["fid.data"] = "synthetic 60"; },
       "made from the data synthetic 60, not synthetic 50"},
      {"a NaN mean", [](SafetensorsFile& f) { f.tensors["mean"].fill_(std::nan("")); },
       "it holds a mean that is not finite"},
      {"a covariance of all -1", [](SafetensorsFile& f) { f.tensors["cov"].fill_(-1.0); },
       "it holds a covariance that is not positive semi-definite"},
      {"a count of -7", [](SafetensorsFile& f) { f.tensors["count"].fill_(-7.0); },
       "it holds a count of -7 samples"},
      {"a 127 x 127 covariance",
       [d](SafetensorsFile& f) {
         f.tensors["cov"] = Tensor::zeros({d - 1, d - 1}, DType::f64);
       },
       "it holds a covariance of shape [127, 127], not [128, 128]"},
      {"no covariance", [](SafetensorsFile& f) { f.tensors.erase("cov"); },
       "no tensor 'cov'; not FID statistics"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    if (group->rank() == 0) {
      SafetensorsFile file = load_safetensors(path);
      c.spoil(file);
      save_safetensors(path, file.tensors, file.metadata);
    }
    group->barrier()->wait();
    std::vector<std::string> lines;
    const GaussianStats again = real_stats(net, net_hash, real, identity, cache, *group,
                                           [&](const std::string& l) { lines.push_back(l); });
    if (group->rank() == 0) {
      const std::string want = "FID real statistics: refusing " + path + ": " + c.reason;
      CHECK(
          std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.starts_with(want); }));
      CHECK(std::any_of(lines.begin(), lines.end(),
                        [&](const std::string& l) { return l.ends_with("computing them again"); }));
    }
    CHECK(again.count == good.count);
    CHECK(again.cov.to_vector() == good.cov.to_vector());  // computed again: the same sums
    CHECK(again.mean.to_vector() == good.mean.to_vector());
  }
  group->barrier()->wait();  // rank 0's directory outlives the others' reads
}

TEST_CASE("every rank gets rank 0's cached feature network, its own cache unread and left empty",
          "[fid][cache]") {
  if (!testing::fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  // A cache per node: warm on rank 0 (a network that training would not give, so that a
  // rank that trained instead would differ), cold everywhere else. It used to have rank 1
  // train its own network inside the GAN's Reducer and fail 144 s later.
  testing::TempDir dir("fid-cache-per-node");
  const std::string cache = dir.file("rank" + std::to_string(testing::world()->rank()));
  const FeatureNetConfig config;
  std::string planted_weights;
  if (testing::world()->rank() == 0)
    planted_weights = weights_hash(*testing::plant_feature_net(cache, config.seed + 100).net);
  planted_weights = dist::broadcast_string(*testing::world(), planted_weights, 0, "planted weights");
  const LoadedFeatureNet got =
      load_or_train_feature_net(data::kFashionMnistDefaultDir, cache, config, *testing::world());
  CHECK(got.from_cache);
  CHECK(weights_hash(*got.net) == planted_weights);
  if (testing::world()->rank() != 0) CHECK_FALSE(std::filesystem::exists(cache));
}

TEST_CASE("a cached feature network that does not verify is named by file and key before it is trained again",
          "[fid][cache]") {
  if (!testing::fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  // A file without a checksum whose recorded accuracy is not a number: it used to end the
  // run with "error: stod", naming neither. The training that follows fails on purpose (the
  // refusal is logged before it), so that the test does not train for minutes.
  testing::TempDir dir("fid-cache-bad-net");
  const std::string cache =
      dist::broadcast_string(*testing::world(), dir.path.string(), 0, "test: cache dir");
  const FeatureNetConfig config;
  std::string path, hash;
  if (testing::world()->rank() == 0) {
    const LoadedFeatureNet planted = testing::plant_feature_net(cache);
    path = planted.path;
    hash = planted.hash;
    SafetensorsFile file = load_safetensors(path);
    file.metadata["fid.test_accuracy"] = "about 0.8";
    save_safetensors(path, file.tensors, file.metadata);
  }
  std::vector<std::string> lines;
  ::setenv(kFeatureNetTrainingFaultEnv, "1", 1);
  CHECK_THROWS_WITH(load_or_train_feature_net(data::kFashionMnistDefaultDir, cache, config, *testing::world(),
                                              [&](const std::string& l) { lines.push_back(l); }),
                    Catch::Contains("training failed on purpose"));
  ::unsetenv(kFeatureNetTrainingFaultEnv);
  if (testing::world()->rank() == 0) {
    const std::string want =
        "FID feature network " + short_hash(hash) + ": refusing " + path +
        ": metadata key fid.test_accuracy is 'about 0.8', not a number; training it again";
    INFO(lines.size() << " lines logged");
    CHECK(std::find(lines.begin(), lines.end(), want) != lines.end());
  }
}

TEST_CASE("a feature network rank 0 fails to train ends every rank at once, naming rank 0's error",
          "[fid][cache]") {
  if (!testing::fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  // A cold cache, and rank 0's training failing on purpose. The other ranks used to wait for
  // its weights up to the two hours allowed for training.
  testing::TempDir dir("fid-cache-failing");
  const std::string cache =
      dist::broadcast_string(*testing::world(), dir.path.string(), 0, "test: cache dir");
  const bool lead = testing::world()->rank() == 0;
  if (lead) ::setenv(kFeatureNetTrainingFaultEnv, "1", 1);
  struct Unset {
    ~Unset() { ::unsetenv(kFeatureNetTrainingFaultEnv); }
  } unset;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      load_or_train_feature_net(data::kFashionMnistDefaultDir, cache, FeatureNetConfig{}, *testing::world()),
      Catch::Contains(lead ? "FID feature network" : "rank 0 could not train it: ") &&
          Catch::Contains("training failed on purpose"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(120));
  testing::world()->barrier()->wait();  // rank 0's directory outlives the others' checks
}
