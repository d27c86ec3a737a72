#include "models/train/ema_weights.h"

#include <algorithm>

#include "kernels/elementwise.h"

namespace tandem::models {

EmaWeights::EmaWeights(std::vector<Variable> params, double max_decay)
    : params_(std::move(params)), max_decay_(max_decay) {
  if (max_decay_ > 0) {
    for (const Variable& p : params_) average_.push_back(p.data().clone());
  }
}

double EmaWeights::decay_at(double max_decay, int64_t iteration) {
  return std::min(max_decay, static_cast<double>(iteration + 1) / static_cast<double>(iteration + 10));
}

void EmaWeights::update(int64_t iteration) {
  const double decay = decay_at(max_decay_, iteration);
  for (size_t i = 0; i < average_.size(); ++i) {
    kernels::scale_(average_[i], decay);
    kernels::axpy_(average_[i], 1.0 - decay, params_[i].data());
  }
}

ScopedAverage::ScopedAverage(const EmaWeights& ema) : params_(ema.parameters()) {
  const std::vector<Tensor>& average = ema.tensors();
  for (size_t i = 0; i < average.size(); ++i) {
    live_.push_back(params_[i].data().clone());
    params_[i].data().copy_(average[i]);
  }
}

ScopedAverage::~ScopedAverage() {
  for (size_t i = 0; i < live_.size(); ++i) params_[i].data().copy_(live_[i]);
}

}  // namespace tandem::models
