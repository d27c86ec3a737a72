// Small helpers for the benchmarks' command lines.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace tandem::bench {

// "a,b,,c" -> {"a", "b", "c"}
inline std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace tandem::bench
