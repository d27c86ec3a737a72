// The Reducer's report of parameters a backward left unreached
// (ReducerOptions::detect_anomalous_params, reducer/reducer.h): local, no communication.
#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "reducer/reducer.h"
#include "runtime/error.h"

namespace tandem {

void Reducer::detect_unreached(const std::vector<bool>& local, int64_t backward) {
  const ModelParts& parts = agreement_.parts();
  std::vector<bool> part_reached(parts.names.size(), false), unreached(params_.size(), false);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (local[i]) part_reached[parts.of[i]] = true;
  }
  if (std::find(part_reached.begin(), part_reached.end(), true) == part_reached.end()) {
    return;  // this backward is not about our parameters
  }
  unreached_.clear();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (local[i] || !part_reached[parts.of[i]] || !params_[i].requires_grad()) continue;
    unreached[i] = true;
    unreached_.push_back(names_[i]);
  }
  if (unreached_.empty() || !unreached_warned_.insert(unreached).second) return;
  std::ostringstream line;
  line << "tandem: warning: " << process_label() << "detect_anomalous_params: backward " << backward << " of "
       << options_.name << " did not reach " << unreached_.size() << " parameter"
       << (unreached_.size() == 1 ? "" : "s") << " that require grad, in the parts it reached:";
  const char* separator = " ";
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!unreached[i]) continue;
    line << separator << "'" << names_[i] << "' " << shape_str(params_[i].data().shape());
    separator = ", ";
  }
  line << " (each set is reported once)";
  write_stderr_line(line.str());
}

}  // namespace tandem
