// ADA's adaptive augmentation probability (Karras et al. 2020, StyleGAN2-ADA), agreed by every
// rank: p rises while D is too sure of the reals and falls when it is not.
//
// Contract:
// - AdaptiveAugment(target, step) starts at p = 0. observe(sum, count) adds this rank's
//   sum of sign(D(real)) and count of D's outputs for one iteration.
// - end_iteration(done, flush, group) after iteration done - 1: at multiples of kInterval
//   (4) of `done`, or when `flush` (a checkpoint follows), it allreduces (sum) this rank's
//   counts since the last reduction over `group`, one float64 [2] allreduce_host, and
//   adds them to the interval's. At multiples of kInterval it then sets
//   p = clamp(p + sign(sum / count - target) * step, 0, 1) and clears the interval. The
//   counts are whole numbers, exact in float64, so p is the same on every rank bit for bit,
//   whatever the number of ranks and however often flush came.
// - state(): float64 [3] {p, interval sum, interval count}, the same on every rank after a
//   flush; a checkpoint written right after end_iteration(.., flush = true, ..) and
//   restored into state() continues the run bit for bit.
// - ada_step(global_batch, kimg) = global_batch * kInterval / (kimg * 1000): StyleGAN2-ADA's
//   speed, p can go from 0 to 1 in `kimg` thousand real images.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dist/process_group.h"
#include "runtime/tensor.h"

namespace tandem::models {

class AdaptiveAugment {
 public:
  static constexpr int64_t kInterval = 4;

  AdaptiveAugment(double target, double step);

  double p() const;
  void observe(double sign_sum, double count);
  void end_iteration(int64_t done, bool flush, dist::ProcessGroup& group);
  std::vector<Tensor>& state() { return state_; }

 private:
  double target_, step_;
  double local_sum_ = 0.0, local_count_ = 0.0;  // this rank's, since the last reduction
  std::vector<Tensor> state_;
};

double ada_step(int64_t global_batch, double kimg);

}  // namespace tandem::models
