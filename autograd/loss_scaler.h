// A dynamic loss scale for reduced-precision training: PyTorch's GradScaler algorithm, one
// scaler per optimizer (a GAN's G and D decide on their own).
//
// Why: fp16 gradients of small losses underflow to zero. Multiplying the loss by a large
// scale S before the backward keeps them representable; the gradients are divided by S
// again before the optimizer steps. S is as large as the gradients allow: it backs off when
// they overflow and grows again after a run of clean steps.
//
// Contract:
// - LossScaler(options): S starts at init_scale; growth_factor > 1, 0 < backoff_factor < 1,
//   growth_interval >= 1 and init_scale positive and finite, else an Error naming the value.
// - scale_loss(loss) is loss x S (its backward gives gradients x S).
// - unscale_(params) divides every defined gradient of `params` by S in place (a power of
//   two: exact in binary floating point unless the result underflows) and returns true when
//   every one is finite afterwards, false when any holds a NaN or an Inf (an overflow: the
//   caller skips the step). On data-parallel ranks the gradients are the Reducer's averages,
//   bitwise equal on every rank, so every rank returns the same verdict without a collective.
// - update(found_inf) after each step taken or skipped: on found_inf, S x= backoff_factor
//   and the run of clean steps restarts at 0; otherwise the run grows by one and, when it
//   reaches growth_interval, S x= growth_factor (kept only while finite) and the run
//   restarts at 0. That is torch.amp's _amp_update_scale_.
// - skipped_steps() counts update(true) calls; state() holds S (float64) and the run of
//   clean steps and skipped steps (int64) as tensors, for a Checkpoint's add_tensors: a
//   resumed scaler continues the same sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {});

  double scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;
  const LossScalerOptions& options() const { return options_; }

  Variable scale_loss(const Variable& loss) const;
  bool unscale_(const std::vector<Variable>& params) const;
  void update(bool found_inf);

  std::vector<Tensor>& state() { return state_; }

 private:
  LossScalerOptions options_;
  std::vector<Tensor> state_;  // [scale f64 [1], growth tracker i64 [1], skipped steps i64 [1]]
};

}  // namespace tandem::optim
