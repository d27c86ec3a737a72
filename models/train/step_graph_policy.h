// When a training step runs eagerly, is captured into a CUDA graph, or replays it.
// Host logic only (no CUDA), so that it is tested without a GPU.
//
// Contract:
// - The caller describes each step by a key: everything the captured step depends on
//   that can change between iterations (the model's structure, the batch's shapes; a
//   progressive GAN's fade-in changes its structure at every iteration). Equal keys mean
//   the same step: same shapes, same parameters reached, same phases.
// - next(key) returns eager for the first `warmup` iterations of a key that has just
//   appeared (the eager steps make and rebuild its Reducer phases and warm the allocator),
//   capture at the next one, and replay while the key stays that captured one. Any change
//   of key discards the graph (the caller destroys it before running the step) and counts
//   the warm-up again. Every rank computes the same keys in the same order, so every rank
//   captures and replays at the same iterations: this is what lets a replayed step skip
//   the Reducer's agreement (reducer.h).
// - note() is one line describing the latest decision when it changed the mode (a
//   capture, or a graph discarded), "" otherwise: what the trainer logs.
// - warmup must be at least 2 (a Reducer phase is rebuilt at its second backward):
//   smaller is an Error naming it.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::models {

enum class StepMode { eager, capture, replay };
const char* step_mode_name(StepMode mode);

inline constexpr int64_t kDefaultGraphWarmup = 3;

class StepGraphPolicy {
 public:
  explicit StepGraphPolicy(int64_t warmup = kDefaultGraphWarmup);

  StepMode next(const std::string& key);
  const std::string& note() const { return note_; }
  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  int64_t discards() const { return discards_; }

 private:
  int64_t warmup_;
  std::string last_key_;
  int64_t same_key_runs_ = 0;  // consecutive iterations with last_key_
  bool captured_ = false;      // a graph of last_key_ exists
  std::string note_;
  int64_t captures_ = 0, replays_ = 0, discards_ = 0;
};

}  // namespace tandem::models
