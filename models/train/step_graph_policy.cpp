#include "models/train/step_graph_policy.h"

#include "runtime/error.h"

namespace tandem::models {

const char* step_mode_name(StepMode mode) {
  switch (mode) {
    case StepMode::eager:
      return "eager";
    case StepMode::capture:
      return "capture";
    case StepMode::replay:
      return "replay";
  }
  return "?";
}

StepGraphPolicy::StepGraphPolicy(int64_t warmup) : warmup_(warmup) {
  TANDEM_CHECK(warmup >= 2,
               "CUDA graphs: the warm-up must be at least 2 eager iterations (a Reducer phase "
               "is rebuilt at its second backward), got "
                   << warmup);
}

StepMode StepGraphPolicy::next(const std::string& key) {
  note_.clear();
  if (key == last_key_ && same_key_runs_ > 0) {
    ++same_key_runs_;
    if (captured_) {
      ++replays_;
      return StepMode::replay;
    }
  } else {
    if (captured_) {
      note_ = "cuda graphs: the step changed (" + last_key_ + " -> " + key + "): graph discarded, " +
              std::to_string(warmup_) + " eager iterations before capturing again";
      ++discards_;
    }
    captured_ = false;
    last_key_ = key;
    same_key_runs_ = 1;
  }
  if (same_key_runs_ <= warmup_) return StepMode::eager;
  captured_ = true;
  ++captures_;
  note_ =
      "cuda graphs: capturing the step (" + key + ") after " + std::to_string(warmup_) + " eager iterations";
  return StepMode::capture;
}

}  // namespace tandem::models
