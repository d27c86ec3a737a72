// The per-log-point numbers every rank contributes: its losses and its memory.
//
// Contract:
// - resident_mb() is this process's current resident set size in MB (10^6 bytes), from
//   /proc/self/statm; -1 where there is no /proc. The current size, not the peak, so that
//   a soak test can compare it between two points of one run to see memory stay flat.
// - gather_rank_stats(world, loss_d, loss_g, terms) is collective, one allreduce on every
//   rank: it returns the losses and the named terms (a penalty's value, the critic's
//   Wasserstein estimate: the same names on every rank) averaged over the ranks (in
//   float32), the terms in the order given, and every rank's resident size in rank order
//   (as float32, so to about 7 digits).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "runtime/dist/process_group.h"

namespace tandem::models {

double resident_mb();

struct RankStats {
  double loss_d = 0.0;
  double loss_g = 0.0;
  std::vector<std::pair<std::string, double>> terms;
  std::vector<double> rss_mb;  // one per rank
};

RankStats gather_rank_stats(dist::ProcessGroup& world, double loss_d, double loss_g,
                            const std::vector<std::pair<std::string, double>>& terms = {});

}  // namespace tandem::models
