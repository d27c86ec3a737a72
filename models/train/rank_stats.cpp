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

RankStats gather_rank_stats(dist::ProcessGroup& world, double loss_d, double loss_g,
                            const std::vector<std::pair<std::string, double>>& terms) {
  const int rank = world.rank(), size = world.size();
  // One collective per log point: the losses and terms summed (averaged below) and each
  // rank's resident size in its own slot, so rank 0 learns every rank's.
  const int64_t averaged = 2 + static_cast<int64_t>(terms.size());
  Tensor logged = Tensor::zeros({averaged + size});
  float* values = logged.data<float>();
  values[0] = static_cast<float>(loss_d);
  values[1] = static_cast<float>(loss_g);
  for (size_t i = 0; i < terms.size(); ++i) values[2 + i] = static_cast<float>(terms[i].second);
  values[averaged + rank] = static_cast<float>(resident_mb());
  dist::allreduce_host(world, logged, dist::ReduceOp::sum, "logged losses and resident sizes");
  auto mean = [&](size_t i) { return values[i] / static_cast<float>(size); };
  RankStats stats;
  stats.loss_d = mean(0);
  stats.loss_g = mean(1);
  for (size_t i = 0; i < terms.size(); ++i) stats.terms.emplace_back(terms[i].first, mean(2 + i));
  for (int r = 0; r < size; ++r) stats.rss_mb.push_back(logged.at(averaged + r));
  return stats;
}

}  // namespace tandem::models
