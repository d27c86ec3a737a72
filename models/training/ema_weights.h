// An exponential moving average of a set of parameters (the generator's weights, from which
// sample pictures are drawn).
//
// Contract:
// - max_decay 0 turns the average off: tensors() is empty and every call does nothing.
// - Otherwise the average starts as a copy of the parameters. update(t), after the optimizer
//   step of iteration t (from 0), sets average = d * average + (1 - d) * parameter, with
//   d = decay_at(max_decay, t) = min(max_decay, (t + 1) / (t + 10)): the ramp keeps a short
//   run from being dominated by the initial weights. The arithmetic is float32 on the
//   parameters' device, so the average is identical on every rank when the weights are.
// - Or by a half-life in images (StyleGAN's ema_kimg, EmaHalfLife): update(t) uses
//   d = half_life_decay(h, t * h.global_batch), the images seen before iteration t over all
//   ranks, where half_life_decay(h, n) = 0.5 ^ (global_batch / max(H, 1e-8)) with
//   H = kimg * 1000, or min(kimg * 1000, n * rampup) when rampup > 0 (StyleGAN's ema_rampup:
//   d is 0 at t = 0, so the average starts at the weights after the first step). It depends
//   on the iteration and the global batch alone: every rank, and a resume at any number of
//   ranks, takes the same sequence. kimg must be positive, global_batch at least 1, rampup
//   0 or positive (an Error otherwise).
// - tensors() is the average in the parameters' order (checkpoints save and restore it).
// - ScopedAverage puts the average into the parameters for its lifetime and their live
//   values back, bitwise, when it ends.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem::training {

struct EmaHalfLife {
  double kimg = 10.0;        // the average halves its weight on the past every kimg * 1000 images
  double rampup = 0.0;       // > 0: the half-life is at most rampup times the images seen
  int64_t global_batch = 1;  // images per iteration, over all ranks
};

class EmaWeights {
 public:
  EmaWeights(std::vector<Variable> params, double max_decay);
  EmaWeights(std::vector<Variable> params, EmaHalfLife half_life);

  static double decay_at(double max_decay, int64_t iteration);
  static double half_life_decay(const EmaHalfLife& half_life, int64_t images_seen);
  double decay(int64_t iteration) const;  // the d update(iteration) uses
  void update(int64_t iteration);

  std::vector<Tensor>& tensors() { return average_; }
  const std::vector<Tensor>& tensors() const { return average_; }
  const std::vector<Variable>& parameters() const { return params_; }

 private:
  std::vector<Variable> params_;
  double max_decay_;
  std::optional<EmaHalfLife> half_life_;
  std::vector<Tensor> average_;
};

class ScopedAverage {
 public:
  explicit ScopedAverage(const EmaWeights& ema);
  ~ScopedAverage();
  ScopedAverage(const ScopedAverage&) = delete;
  ScopedAverage& operator=(const ScopedAverage&) = delete;

 private:
  std::vector<Variable> params_;
  std::vector<Tensor> live_;
};

}  // namespace tandem::training
