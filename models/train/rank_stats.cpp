#include "models/train/rank_stats.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>

namespace tandem::models {

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0, resident_pages = 0;
  if (!(statm >> total_pages >> resident_pages)) return -1.0;
  return static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

RankStats gather_rank_stats(dist::ProcessGroup& world, double loss_d, double loss_g) {
  const int rank = world.rank(), size = world.size();
  // One collective per log point: the losses summed (averaged below) and each rank's
  // resident size in its own slot, so rank 0 learns every rank's.
  Tensor logged = Tensor::zeros({2 + size});
  logged.data<float>()[0] = static_cast<float>(loss_d);
  logged.data<float>()[1] = static_cast<float>(loss_g);
  logged.data<float>()[2 + rank] = static_cast<float>(resident_mb());
  dist::allreduce_host(world, logged, dist::ReduceOp::sum, "logged losses and resident sizes");
  RankStats stats;
  stats.loss_d = logged.data<float>()[0] / static_cast<float>(size);
  stats.loss_g = logged.data<float>()[1] / static_cast<float>(size);
  for (int r = 0; r < size; ++r) stats.rss_mb.push_back(logged.at(2 + r));
  return stats;
}

}  // namespace tandem::models
