#include "models/metrics/fid_eval.h"

#include <filesystem>
#include <vector>

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

  // Rank 0's view of the cache decides, so ranks on other file systems follow it.
  Tensor cached = Tensor::zeros({1}, DType::i64);
  if (group.rank() == 0 && std::filesystem::exists(path)) cached.data<int64_t>()[0] = 1;
  dist::broadcast_host(group, cached, 0, "FID real statistics: cached?");
  GaussianStats stats;
  if (cached.data<int64_t>()[0] == 1) {
    const int64_t d = kFeatureDim;
    stats.mean = Tensor::zeros({d}, DType::f64);
    stats.cov = Tensor::zeros({d, d}, DType::f64);
    Tensor count = Tensor::zeros({1}, DType::f64);
    if (group.rank() == 0) {
      const SafetensorsFile file = load_safetensors(path);
      for (const char* name : {"mean", "cov", "count"}) {
        TANDEM_CHECK(file.tensors.count(name), path << ": no tensor '" << name << "'; not FID statistics");
      }
      stats.mean.copy_(file.tensors.at("mean"));
      stats.cov.copy_(file.tensors.at("cov"));
      count.copy_(file.tensors.at("count"));
    }
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
    std::filesystem::create_directories(cache_dir);
    save_safetensors(path,
                     {{"mean", stats.mean},
                      {"cov", stats.cov},
                      {"count", Tensor::from_values({1}, {static_cast<double>(stats.count)}, DType::f64)}},
                     {{"fid.feature_net", net_hash}, {"fid.data", real_identity}});
    if (log) log("FID real statistics of " + std::to_string(stats.count) + " images: wrote " + path);
  }
  return stats;
}

}  // namespace tandem::metrics
