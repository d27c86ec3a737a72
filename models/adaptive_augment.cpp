#include "models/adaptive_augment.h"

#include <algorithm>

#include "runtime/error.h"

namespace tandem::models {

AdaptiveAugment::AdaptiveAugment(double target, double step)
    : target_(target), step_(step), state_{Tensor::zeros({3}, DType::f64)} {
  TANDEM_CHECK(step > 0, "AdaptiveAugment: step " << step << " must be positive");
}

double AdaptiveAugment::p() const { return state_[0].data<double>()[0]; }

void AdaptiveAugment::observe(double sign_sum, double count) {
  local_sum_ += sign_sum;
  local_count_ += count;
}

void AdaptiveAugment::end_iteration(int64_t done, bool flush, dist::ProcessGroup& group) {
  const bool adjust = done % kInterval == 0;
  if (!adjust && !flush) return;
  Tensor counts = Tensor::from_values({2}, {local_sum_, local_count_}, DType::f64);
  allreduce_host(group, counts, dist::ReduceOp::sum, "adaptive augmentation");
  local_sum_ = local_count_ = 0.0;
  double* s = state_[0].data<double>();
  s[1] += counts.data<double>()[0];
  s[2] += counts.data<double>()[1];
  if (!adjust || s[2] == 0) return;
  const double signal = s[1] / s[2] - target_;
  const double direction = signal > 0 ? 1.0 : signal < 0 ? -1.0 : 0.0;
  s[0] = std::clamp(s[0] + direction * step_, 0.0, 1.0);
  s[1] = s[2] = 0.0;
}

double ada_step(int64_t global_batch, double kimg) {
  TANDEM_CHECK(global_batch > 0 && kimg > 0, "ada_step: global batch " << global_batch << ", kimg " << kimg);
  return static_cast<double>(global_batch * AdaptiveAugment::kInterval) / (kimg * 1000.0);
}

}  // namespace tandem::models
