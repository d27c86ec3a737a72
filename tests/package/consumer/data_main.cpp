// The package tests' data consumer: a program that links tandem::data alone (no model, no
// Reducer, no MPI) to shard a dataset the way tandem-train does. With 2 ranks of batch 4
// over an epoch of 24 rows, the ranks' batches must be disjoint and cover the epoch; and an
// image folder that does not exist must be an error naming it. Exits 1 otherwise.
#include <cstdio>
#include <set>
#include <string>

#include "models/data/image_folder.h"
#include "models/data/sampler.h"
#include "runtime/error.h"

int main() {
  using namespace tandem;
  std::set<int64_t> seen;
  int64_t rows = 0;
  for (int rank = 0; rank < 2; ++rank) {
    data::DistributedSampler sampler(24, 2, rank, 4, /*seed=*/5);
    for (int64_t i = 0; i < sampler.batches_per_epoch(); ++i) {
      for (int64_t index : sampler.batch_indices(i)) {
        seen.insert(index);
        ++rows;
      }
    }
  }
  if (rows != 24 || seen.size() != 24) {
    std::fprintf(stderr, "data_consumer: the shards hold %lld rows, %zu distinct, of 24\n",
                 static_cast<long long>(rows), seen.size());
    return 1;
  }
  try {
    data::load_image_folder("no-such-folder", {});
    std::fprintf(stderr, "data_consumer: a missing image folder loaded\n");
    return 1;
  } catch (const Error& e) {
    if (e.message().find("no-such-folder") == std::string::npos) {
      std::fprintf(stderr, "data_consumer: the error does not name the folder: %s\n", e.what());
      return 1;
    }
  }
  std::printf("data_consumer: 2 shards of 24 rows disjoint and complete, with tandem::data alone\n");
  return 0;
}
