// Ranks agree on the run's settings before training.
//
// Contract:
// - check_settings_agree(world, settings) is collective over `world`, every rank passing
//   its own list (run_settings.h). Each rank hashes its settings marked agreed_across_ranks; one allreduce
//   (max) of two int64s tells every rank whether all hashes are equal. If they are, it returns. If not, every
//   rank gathers every rank's list (one broadcast_string per rank) and throws the same Error: "settings
//   differ across ranks: <differences>. Start every rank with the same flags (only --out and --data-dir may
//   differ, and the data there may not)". No rank is left waiting in a collective.
// - describe_setting_differences(per_rank), per_rank[r] being rank r's list, is that
//   message's <differences>: for each flag whose value is not the same on every rank (in
//   rank 0's order, then flags only other ranks list), each value as written followed by
//   the ranks that have it, first seen first, e.g. "--lr 0.0002 on ranks 0, 2-3, --lr 0.001
//   on rank 1; --dynamic on rank 0, no --dynamic on rank 1"; a rank without the flag has
//   "no value for --flag". Empty when every rank has the same list.
#pragma once

#include <vector>

#include "models/train/run_settings.h"
#include "runtime/dist/process_group.h"

namespace tandem::models {

void check_settings_agree(dist::ProcessGroup& world, const std::vector<RunSetting>& settings);

std::string describe_setting_differences(const std::vector<std::vector<RunSetting>>& per_rank);

}  // namespace tandem::models
