// The FID feature network tandem ships: it loads, its weights are the ones whose SHA-256 the
// code names, it classifies the test set as its file records, and a file that differs from
// it (a flipped byte, other weights written as a valid file) is refused by name. The FID of
// a fixed set of real images under it is pinned: the figure any machine must print.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>

#include "models/data/dataset.h"
#include "models/metrics/fid.h"
#include "models/metrics/fid_eval.h"
#include "models/metrics/shipped_feature_net.h"
#include "runtime/checkpoint.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/metrics/plant_feature_net.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::metrics;
using namespace tandem::testing;

// Measured with the shipped network on this project's machine (x86-64, AVX-512, oneDNN).
constexpr double kPinnedFid = 2.2343057809;

TEST_CASE("the shipped feature network loads, named by its weights' SHA-256", "[fid][shipped]") {
  const std::string path = shipped_feature_net_path();
  INFO(path);
  const LoadedFeatureNet net = load_shipped_feature_net(path);
  CHECK(weights_sha256(*net.net) == kShippedFeatureNetSha256);
  CHECK(net.weights_id == std::string(kShippedFeatureNetSha256).substr(0, 16));
  CHECK(net.test_accuracy == Approx(0.9037).margin(1e-9));  // as its file records
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): its accuracy is not measured");
    return;
  }
  // Measured here: an argmax may flip on a CPU that rounds otherwise, not more than a few.
  const data::ImageDataset test = data::load_fashion_mnist(data::kFashionMnistDefaultDir, false);
  CHECK(test_accuracy(*net.net, test) == Approx(0.9037).margin(5e-4));
}

TEST_CASE("a shipped network file that was changed is refused, naming it", "[fid][shipped]") {
  TempDir tmp("shipped_net");
  const std::string flipped = tmp.file("flipped.safetensors"), other = tmp.file("other.safetensors");
  std::string bytes = read_bytes(shipped_feature_net_path());
  bytes[bytes.size() - 100] ^= 0x01;  // one bit of a weight
  write_bytes(flipped, bytes);
  CHECK_THROWS_WITH(load_shipped_feature_net(flipped),
                    Catch::Contains("FID's shipped feature network: " + flipped + ": checksum mismatch"));
  // A well-formed file with other weights passes the checksum; the SHA-256 refuses it.
  FeatureNet net(FeatureNetConfig{}.seed + 1);
  save_safetensors(other, net.state_dict(), {{"fid.test_accuracy", "0.9"}});
  CHECK_THROWS_WITH(
      load_shipped_feature_net(other),
      Catch::Contains(other + ": its weights' SHA-256 is ") &&
          Catch::Contains("not the shipped network's " + std::string(kShippedFeatureNetSha256)));
  CHECK_THROWS_WITH(load_shipped_feature_net(tmp.file("absent.safetensors")),
                    Catch::Contains(tmp.file("absent.safetensors")));
}

TEST_CASE("the FID of fixed real images under the shipped network is the figure every machine prints",
          "[fid][shipped]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  const LoadedFeatureNet net = load_shipped_feature_net(shipped_feature_net_path());
  const data::ImageDataset train = data::load_fashion_mnist(data::kFashionMnistDefaultDir, true);
  const data::ImageDataset test = data::load_fashion_mnist(data::kFashionMnistDefaultDir, false);
  double value = 0;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    const GaussianStats a = sharded_stats(*net.net, train.images.narrow_rows(0, 2000), 0, *world, "a");
    const GaussianStats b = sharded_stats(*net.net, test.images, 0, *world, "b");
    value = fid(a, b);
  });
  // Training images [0, 2000) against the 10000 test images, as tandem prints it (4 decimals).
  // oneDNN blocks its float32 convolutions for the CPU it finds (ISA, cache sizes), which
  // orders the features' sums otherwise on another CPU model: 2.2343058 where pinned,
  // 2.2343006 on another AVX-512 EPYC. Both print 2.2343; the bound is half that last digit.
  CHECK(value == Approx(kPinnedFid).margin(5e-5));
}
