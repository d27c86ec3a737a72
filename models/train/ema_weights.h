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
// - tensors() is the average in the parameters' order (checkpoints save and restore it).
// - ScopedAverage puts the average into the parameters for its lifetime and their live
//   values back, bitwise, when it ends.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem::models {

class EmaWeights {
 public:
  EmaWeights(std::vector<Variable> params, double max_decay);

  static double decay_at(double max_decay, int64_t iteration);
  void update(int64_t iteration);

  std::vector<Tensor>& tensors() { return average_; }
  const std::vector<Tensor>& tensors() const { return average_; }
  const std::vector<Variable>& parameters() const { return params_; }

 private:
  std::vector<Variable> params_;
  double max_decay_;
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

}  // namespace tandem::models
