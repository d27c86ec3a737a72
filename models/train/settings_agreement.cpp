#include "models/train/settings_agreement.h"

#include <algorithm>
#include <bit>
#include <map>
#include <sstream>

namespace tandem::models {

namespace {

// One line per setting the ranks must agree on: flag, value and kind, tab-separated (no value
// holds a tab or a newline: paths, the only free text, are not settings).
std::string serialize(const std::vector<RunSetting>& settings) {
  std::string text;
  for (const RunSetting& s : settings) {
    if (!s.agreed_across_ranks) continue;
    text += s.flag + "\t" + s.value + "\t" + (s.is_switch ? "switch" : "value") + "\n";
  }
  return text;
}

std::vector<RunSetting> deserialize(const std::string& text) {
  std::vector<RunSetting> settings;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t a = line.find('\t'), b = line.rfind('\t');
    if (a == std::string::npos || a == b) continue;
    settings.push_back({.flag = line.substr(0, a),
                        .value = line.substr(a + 1, b - a - 1),
                        .is_switch = line.substr(b + 1) == "switch",
                        .kept_on_resume = false,
                        .on_resume = OnResume::may_change,
                        .resume_note = "",
                        .agreed_across_ranks = true});
  }
  return settings;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// "rank 1", "ranks 0, 2-3".
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return (ranks.size() == 1 ? "rank " : "ranks ") + out;
}

}  // namespace

std::string describe_setting_differences(const std::vector<std::vector<RunSetting>>& per_rank) {
  // Flags in the order the ranks list them, rank 0's first.
  std::vector<std::string> flags;
  std::vector<std::map<std::string, std::string>> written(per_rank.size());
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const RunSetting& s : per_rank[r]) {
      if (std::find(flags.begin(), flags.end(), s.flag) == flags.end()) flags.push_back(s.flag);
      written[r][s.flag] = s.as_written();
    }
  }
  std::string out;
  for (const std::string& flag : flags) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;  // value as written, its ranks
    for (size_t r = 0; r < per_rank.size(); ++r) {
      auto it = written[r].find(flag);
      const std::string value = it != written[r].end() ? it->second : "no value for " + flag;
      auto group =
          std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == value; });
      if (group == groups.end()) group = groups.insert(groups.end(), {value, {}});
      group->second.push_back(static_cast<int>(r));
    }
    if (groups.size() == 1) continue;
    std::string line;
    for (const auto& [value, ranks] : groups)
      line += (line.empty() ? "" : ", ") + value + " on " + rank_list(ranks);
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

void check_settings_agree(dist::ProcessGroup& world, const std::vector<RunSetting>& settings) {
  const std::string mine = serialize(settings);
  // max(h) and max(~h) = ~min(h): equal hashes everywhere exactly when max(h) == ~max(~h).
  const int64_t h = std::bit_cast<int64_t>(fnv1a(mine));
  Tensor both = Tensor::empty({2}, DType::i64);
  both.data<int64_t>()[0] = h;
  both.data<int64_t>()[1] = ~h;
  dist::allreduce_host(world, both, dist::ReduceOp::max, "settings agreement");
  if (both.data<int64_t>()[0] == ~both.data<int64_t>()[1]) return;

  std::vector<std::vector<RunSetting>> per_rank;
  for (int r = 0; r < world.size(); ++r) {
    per_rank.push_back(
        deserialize(dist::broadcast_string(world, mine, r, "settings of rank " + std::to_string(r))));
  }
  std::string differences = describe_setting_differences(per_rank);
  if (differences.empty())
    differences = "the ranks list the same values in another form (other builds of tandem-train?)";
  TANDEM_FAIL("settings differ across ranks: "
              << differences
              << ". Start every rank with the same flags (only --out and --data-dir may differ, and the data "
                 "there may not)");
}

}  // namespace tandem::models
