#include "models/metrics/fid_eval.h"

#include <cmath>
#include <filesystem>
#include <vector>

#include "models/metrics/fid.h"
#include "runtime/checkpoint.h"
#include "runtime/error.h"
#include "runtime/rng.h"

namespace tandem::metrics {

std::pair<int64_t, int64_t> shard_rows(int64_t n, int rank, int world) {
  TANDEM_CHECK(world >= 1 && rank >= 0 && rank < world && n >= 0,
               "shard_rows: bad split (n " << n << ", rank " << rank << ", world " << world << ")");
  return {n * rank / world, n * (rank + 1) / world};
}

GaussianStats sharded_stats(FeatureNet& net, const Tensor& rows, int64_t first_row, dist::ProcessGroup& group,
                            const std::string& tag) {
  FeatureStats stats(kFeatureDim);
  if (rows.size(0) > 0) stats.add(embed(net, rows, kEmbedBatch, first_row));
  stats.allreduce(group, tag);
  return stats.gaussian();
}

GaussianStats generated_stats(FeatureNet& net, const GenerateImages& generate, const Shape& noise_shape,
                              int64_t n, uint64_t seed, dist::ProcessGroup& group, int64_t batch) {
  TANDEM_CHECK(batch >= 1, "generated_stats: batch must be positive, got " << batch);
  const auto [first, end] = shard_rows(n, group.rank(), group.size());
  FeatureStats stats(kFeatureDim);
  // Whole chunks [c * batch, (c + 1) * batch) of the global set, whatever the split: a
  // generator whose output depends on its batch (batch norm in training mode) then makes the
  // same images at any rank count. A chunk that straddles two ranks is made by both.
  for (int64_t chunk = first / batch * batch; chunk < end; chunk += batch) {
    const int64_t length = std::min(batch, n - chunk);
    Shape shape = noise_shape;
    shape.insert(shape.begin(), length);
    const Tensor images = generate(randn_rows(shape, chunk, seed, 0));
    TANDEM_CHECK(images.dim() >= 1 && images.size(0) == length, "generated_stats: the generator made "
                                                                    << shape_str(images.shape()) << " from "
                                                                    << length << " noise rows");
    const int64_t begin = std::max(first, chunk), stop = std::min(end, chunk + length);
    stats.add(embed(net, images.narrow_rows(begin - chunk, stop - begin), kEmbedBatch, begin));
  }
  stats.allreduce(group, "FID statistics of generated samples");
  return stats.gaussian();
}

GaussianStats real_stats(FeatureNet& net, const std::string& net_hash, const data::ImageDataset& real,
                         const std::string& real_identity, const std::string& cache_dir,
                         dist::ProcessGroup& group, const LogLine& log) {
  const std::string path = cache_dir + "/fid-real-" + hash_hex(net_hash + "\n" + real_identity) + ".ckpt";
  const std::string net_weights = group.rank() == 0 ? weights_hash(net) : "";  // rank 0 checks and writes
  const int64_t d = kFeatureDim;

  // Rank 0's view of the cache decides (follow_cache_verdict).
  GaussianStats stats;
  stats.mean = Tensor::zeros({d}, DType::f64);
  stats.cov = Tensor::zeros({d, d}, DType::f64);
  CacheFile file{.dir = cache_dir,
                 .path = path,
                 .what = "FID real statistics",
                 .made = "computed",
                 .redo = "computing them again"};
  if (group.rank() == 0 && std::filesystem::exists(path)) {
    file.present = true;
    std::string& wrong = file.wrong;
    try {
      const SafetensorsFile loaded_file = load_safetensors(path);
      auto text = [&](const char* key) {
        const auto it = loaded_file.metadata.find(key);
        return it == loaded_file.metadata.end() ? std::string("(none)") : it->second;
      };
      for (const char* name : {"mean", "cov", "count"})
        if (!loaded_file.tensors.count(name))
          wrong = std::string("no tensor '") + name + "'; not FID statistics";
      if (wrong.empty() && text("fid.feature_weights") != net_weights)
        wrong = "made with the feature network of weights " + text("fid.feature_weights") + ", not " +
                net_weights;
      if (wrong.empty() && text("fid.data") != real_identity)
        wrong = "made from the data " + text("fid.data") + ", not " + real_identity;
      if (wrong.empty()) {
        GaussianStats loaded{
            .count = 0, .mean = loaded_file.tensors.at("mean"), .cov = loaded_file.tensors.at("cov")};
        const Tensor count = loaded_file.tensors.at("count").to(DType::f64);
        const double c = count.numel() == 1 ? count.item() : -1.0;
        loaded.count = c == std::floor(c) && std::isfinite(c) ? static_cast<int64_t>(c) : -1;
        wrong = check_gaussian(loaded, d);
        if (wrong.empty()) {
          stats.mean.copy_(loaded.mean.to(DType::f64));
          stats.cov.copy_(loaded.cov.to(DType::f64));
          stats.count = loaded.count;
        } else {
          wrong = "it holds " + wrong;
        }
      }
    } catch (const Error& e) {
      wrong = e.message();
    }
  }
  if (follow_cache_verdict(group, file, log)) {
    Tensor count = Tensor::from_values({1}, {static_cast<double>(stats.count)}, DType::f64);
    dist::broadcast_host(group, stats.mean, 0, "FID real statistics: mean");
    dist::broadcast_host(group, stats.cov, 0, "FID real statistics: covariance");
    dist::broadcast_host(group, count, 0, "FID real statistics: count");
    stats.count = static_cast<int64_t>(count.item());
    if (log && group.rank() == 0) log("FID real statistics: loaded " + path);
    return stats;
  }
  const auto [begin, end] = shard_rows(real.size(), group.rank(), group.size());
  stats = sharded_stats(net, real.images.narrow_rows(begin, end - begin), begin, group,
                        "FID statistics of real samples");
  if (group.rank() == 0) {
    save_safetensors(
        path,
        {{"mean", stats.mean},
         {"cov", stats.cov},
         {"count", Tensor::from_values({1}, {static_cast<double>(stats.count)}, DType::f64)}},
        {{"fid.feature_net", net_hash}, {"fid.feature_weights", net_weights}, {"fid.data", real_identity}},
        TemporaryName::unique);  // a cache other jobs may be writing too
    if (log) log("FID real statistics of " + std::to_string(stats.count) + " images: wrote " + path);
  }
  return stats;
}

}  // namespace tandem::metrics
