// FID of sample sets split over ranks: each rank embeds its rows with the feature network
// (feature_net.h), sums their statistics (feature_stats.h), and one allreduce joins them.
//
// Contract:
// - shard_rows(n, rank, world) is rank's part [begin, end) of rows 0..n: begin = n * rank /
//   world (integer division), so parts are contiguous, in rank order, and differ by at most 1.
// - sharded_stats(net, rows, first_row, group, tag) embeds this rank's rows (images
//   [n_r, 1, 28, 28] on the net's device, global rows first_row...) in batches of
//   kEmbedBatch and returns the statistics of all ranks' rows together; collective.
// - generated_stats(net, generate, noise_shape, n, seed, group, batch): the statistics of a
//   global sample set of n rows, made from the noise runtime/rng.h draws for it (rows of
//   iteration 0 of `seed`, as randn_global_rows splits it: the set does not depend on the
//   rank count). The set is made in chunks of `batch` global rows (the last may be shorter)
//   through `generate` (noise [b, ...] float32 on the CPU -> images [b, 1, 28, 28]); each
//   rank makes the chunks that hold its shard_rows and embeds those rows alone, so even a
//   generator whose output depends on its batch gives the same set at any rank count.
//   Collective (one allreduce); a rank may hold no rows.
// - real_stats(net, net_hash, real, real_identity, cache_dir, group, log) is the statistics
//   of all of `real`'s images, cached in "<cache_dir>/fid-real-<16 hex>.ckpt" (hash of the
//   net's hash and the data's identity): rank 0 decides whether the file is there and
//   verified, and broadcasts its content; otherwise every rank embeds its shard and rank 0
//   writes the file (a temporary of its own, then a rename). Collective. The file holds
//   mean, cov (float64) and count, and records the weights hash of the network that made
//   it (fid.feature_weights) and the data's identity (fid.data). Verified: both records
//   match, and the statistics pass check_gaussian (fid.h); a file that does not is computed
//   again and replaced (logged, naming the file and what is wrong) where the cache is
//   writable, else an Error on every rank naming both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "models/metrics/feature_net.h"
#include "models/metrics/feature_stats.h"
#include "runtime/dist/process_group.h"

namespace tandem::metrics {

constexpr int64_t kEmbedBatch = 256;

std::pair<int64_t, int64_t> shard_rows(int64_t n, int rank, int world);

GaussianStats sharded_stats(FeatureNet& net, const Tensor& rows, int64_t first_row, dist::ProcessGroup& group,
                            const std::string& tag);

using GenerateImages = std::function<Tensor(const Tensor& noise)>;
GaussianStats generated_stats(FeatureNet& net, const GenerateImages& generate, const Shape& noise_shape,
                              int64_t n, uint64_t seed, dist::ProcessGroup& group, int64_t batch = 250);

GaussianStats real_stats(FeatureNet& net, const std::string& net_hash, const data::ImageDataset& real,
                         const std::string& real_identity, const std::string& cache_dir,
                         dist::ProcessGroup& group, const LogLine& log = {});

}  // namespace tandem::metrics
