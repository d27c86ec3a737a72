#include "models/training/ema_weights.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "runtime/error.h"

namespace tandem::training {

EmaWeights::EmaWeights(std::vector<Variable> params, double max_decay)
    : params_(std::move(params)), max_decay_(max_decay) {
  if (max_decay_ > 0) {
    for (const Variable& p : params_) average_.push_back(p.data().clone());
  }
}

EmaWeights::EmaWeights(std::vector<Variable> params, EmaHalfLife half_life)
    : EmaWeights(std::move(params), 1.0) {
  TANDEM_CHECK(half_life.kimg > 0 && half_life.rampup >= 0 && half_life.global_batch >= 1,
               "EmaWeights: a half-life of " << half_life.kimg << " kimg, ramp-up " << half_life.rampup
                                             << ", global batch " << half_life.global_batch
                                             << ": needs kimg > 0, rampup >= 0, global batch >= 1");
  half_life_ = half_life;
}

// StyleGAN's training loop, in double as there.
double EmaWeights::half_life_decay(const EmaHalfLife& h, int64_t images_seen) {
  double ema_nimg = h.kimg * 1000;
  if (h.rampup > 0) ema_nimg = std::min(ema_nimg, static_cast<double>(images_seen) * h.rampup);
  return std::pow(0.5, static_cast<double>(h.global_batch) / std::max(ema_nimg, 1e-8));
}

double EmaWeights::decay(int64_t iteration) const {
  if (half_life_) return half_life_decay(*half_life_, iteration * half_life_->global_batch);
  return decay_at(max_decay_, iteration);
}

double EmaWeights::decay_at(double max_decay, int64_t iteration) {
  return std::min(max_decay, static_cast<double>(iteration + 1) / static_cast<double>(iteration + 10));
}

void EmaWeights::update(int64_t iteration) {
  const double d = decay(iteration);
  for (size_t i = 0; i < average_.size(); ++i) {
    kernels::scale_(average_[i], d);
    kernels::axpy_(average_[i], 1.0 - d, params_[i].data());
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

}  // namespace tandem::training
