// tandem-fid-features: loads the FID feature network tandem ships (or with --train trains
// one on Fashion-MNIST, or loads it from its cache), computes the real statistics once, and
// measures FID's own figures: the
// time of the statistics of N images at the rank count it runs at, and the FID of two
// disjoint real sets (the metric's sampling noise). With --checkpoint, the FID of a
// tandem-train checkpoint's generator (its moving average when it holds one), and with
// --noise that of two independent sample sets of it. Runs alone or under mpirun.
#include <chrono>
#include <cstdio>
#include <string>

#include "autograd/grad_mode.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/fid.h"
#include "models/metrics/fid_eval.h"
#include "models/metrics/shipped_feature_net.h"
#include "models/train/checkpointer.h"
#include "runtime/command_line.h"
#include "runtime/dist/run_main.h"

namespace {

struct Options {
  std::string data_dir = tandem::data::kFashionMnistDefaultDir;
  std::string cache_dir = tandem::metrics::default_fid_cache_dir();
  tandem::metrics::FeatureNetConfig net;
  bool train = false;
  int64_t samples = 0;
  bool noise = false;
  std::string checkpoint;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int fid_features_main(int argc, char** argv) {
  Options o;
  tandem::CommandLine cli(
      "tandem-fid-features",
      "Load the FID feature network tandem ships (or train one on Fashion-MNIST) and make "
      "its real statistics.");
  cli.add("--data-dir", &o.data_dir, "Fashion-MNIST's directory (Debian package dataset-fashion-mnist)");
  cli.add("--cache-dir", &o.cache_dir, "where the real statistics (and a --train network) are cached");
  cli.add_flag("--train", &o.train,
               "a network of this machine instead of the shipped one: trained on the training set (minutes) "
               "by the recipe below, or loaded from --cache-dir where that recipe's is; named by its "
               "weights' SHA-256");
  cli.add("--seed", &o.net.seed, "with --train: the feature network's initial weights and shuffling");
  cli.add("--epochs", &o.net.epochs, "with --train: training epochs", 1, 1000);
  cli.add("--batch", &o.net.batch, "with --train: training batch", 1, 60000);
  cli.add_positive("--lr", &o.net.lr, "with --train: Adam's learning rate");
  cli.add("--samples", &o.samples,
          "also time the statistics of this many training images at this rank count and print their FID "
          "against the test set's (0: off)",
          0, 30000);
  cli.add_flag("--noise", &o.noise,
               "with --samples N: the FID of training images [0, N) against [N, 2N), the metric's own noise; "
               "with --checkpoint, of two independent sample sets of its generator");
  cli.add(
      "--checkpoint", &o.checkpoint,
      "a tandem-train checkpoint (mlp, dcgan): the FID of --samples (default 10000) images of its generator "
      "against the test set",
      "FILE");
  cli.parse(argc, argv);
  for (const char* flag : {"--seed", "--epochs", "--batch", "--lr"})
    if (cli.given(flag) && !o.train) throw tandem::UsageError(std::string(flag) + " goes with --train");
  if (!o.checkpoint.empty() && o.samples == 0) o.samples = 10000;

  tandem::dist::DistributedContext context;
  auto& group = *context.world();
  const bool lead = group.rank() == 0;
  auto log = [lead](const std::string& line) {
    if (lead) std::printf("%s\n", line.c_str()), std::fflush(stdout);
  };
  auto loaded = o.train
                    ? tandem::metrics::load_or_train_feature_net(o.data_dir, o.cache_dir, o.net, group, log)
                    : tandem::metrics::load_shipped_feature_net(tandem::metrics::shipped_feature_net_path());
  const std::string tag = tandem::metrics::short_hash(loaded.weights_id);
  std::printf("%sfeature network %s (%s): test accuracy %.2f%%, trained in %.1f s, %s\n", lead ? "" : "# ",
              tag.c_str(), o.train ? "trained here" : "shipped", 100.0 * loaded.test_accuracy,
              loaded.train_seconds, loaded.path.c_str());
  if (lead) std::printf("weights SHA-256 %s\n", tandem::metrics::weights_sha256(*loaded.net).c_str());

  const auto test = tandem::data::load_fashion_mnist(o.data_dir, false);
  auto start = std::chrono::steady_clock::now();
  const auto reference = tandem::metrics::real_stats(
      *loaded.net, loaded.weights_id, test, tandem::data::dataset_identity(test), o.cache_dir, group, log);
  double trace = 0.0;
  for (int64_t i = 0; i < tandem::metrics::kFeatureDim; ++i)
    trace += reference.cov.at(i * (tandem::metrics::kFeatureDim + 1));
  char head[160];
  std::snprintf(head, sizeof head,
                "real statistics (test set, %lld images) in %.3f s; trace of their covariance %.4f",
                static_cast<long long>(reference.count), seconds_since(start), trace);
  log(head);
  if (o.samples == 0) return 0;

  char line[240];
  if (!o.checkpoint.empty()) {
    const tandem::models::CheckpointGenerator loaded_gan =
        tandem::models::load_checkpoint_generator(o.checkpoint);
    const std::shared_ptr<tandem::models::GanModel>& gan = loaded_gan.model;
    TANDEM_CHECK(gan->type_name() != "ring8-mlp",
                 o.checkpoint << ": a ring8-mlp checkpoint; FID takes image models (mlp, dcgan)");
    const std::string weights =
        loaded_gan.from_average ? "the moving average" : "the live weights (no moving average in it)";
    tandem::NoGradGuard no_grad;
    auto generate = [&](const tandem::Tensor& noise) {
      const tandem::Tensor images = gan->generate(tandem::Variable(noise)).data();
      return images.reshape({noise.size(0), 1, 28, 28});
    };
    auto stats_of = [&](uint64_t seed) {
      return tandem::metrics::generated_stats(*loaded.net, generate, {gan->noise_dim()}, o.samples, seed,
                                              group);
    };
    start = std::chrono::steady_clock::now();
    const auto a = stats_of(1);
    const double seconds = seconds_since(start);
    std::snprintf(line, sizeof line,
                  "FID %.4f (features %s): %lld samples of %s of %s; statistics in %.3f s at %d rank(s)",
                  tandem::metrics::fid(a, reference), tag.c_str(), static_cast<long long>(o.samples),
                  weights.c_str(), o.checkpoint.c_str(), seconds, group.size());
    log(line);
    if (o.noise) {
      const auto b = stats_of(2);
      std::snprintf(line, sizeof line,
                    "FID %.4f (features %s): two independent sets of %lld samples of that generator; "
                    "the second against the test set %.4f",
                    tandem::metrics::fid(a, b), tag.c_str(), static_cast<long long>(o.samples),
                    tandem::metrics::fid(b, reference));
      log(line);
    }
    return 0;
  }
  const auto train = tandem::data::load_fashion_mnist(o.data_dir, true);
  auto stats_of = [&](int64_t first) {
    const auto [begin, end] = tandem::metrics::shard_rows(o.samples, group.rank(), group.size());
    return tandem::metrics::sharded_stats(*loaded.net, train.images.narrow_rows(first + begin, end - begin),
                                          begin, group, "FID statistics");
  };
  start = std::chrono::steady_clock::now();
  const auto a = stats_of(0);
  const double stats_seconds = seconds_since(start);
  std::snprintf(line, sizeof line,
                "FID %.4f (features %s): training images [0, %lld) against the test set; "
                "statistics in %.3f s at %d rank(s)",
                tandem::metrics::fid(a, reference), tag.c_str(), static_cast<long long>(o.samples),
                stats_seconds, group.size());
  log(line);
  if (o.noise) {
    const auto b = stats_of(o.samples);
    std::snprintf(line, sizeof line, "FID %.4f (features %s): training images [0, %lld) against [%lld, %lld)",
                  tandem::metrics::fid(a, b), tag.c_str(), static_cast<long long>(o.samples),
                  static_cast<long long>(o.samples), static_cast<long long>(2 * o.samples));
    log(line);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tandem::run_main(argc, argv, fid_features_main); }
