// A GAN ready to train data-parallel: the model, its two Adam optimizers (betas from the
// options: 0.5, 0.999 as DCGAN by default; 0, 0.9 for WGAN-GP) in an OptimWrapperDict, and
// the wrapper that synchronises it.
//
// Contract: WrapMode::whole is one DistributedDataParallel (with explicit_prepare, the
// model's backwards are preceded by reducer.prepare_for_backward, MMGeneration style);
// separate is one Reducer per part; none trains the model alone (no communication).
// explicit_prepare with any wrap but whole is an Error naming the wrap.
// Both optimizer wrappers take the options' accumulative_counts and clip_grad. With lazy R1
// (the model's objective: r1_gamma > 0, r1_every > 1) and lazy_r1_correction, D's Adam gets
// lazy_regularization_adam(lr, betas, r1_every) (models/gan.h); with lazy path length
// (pl_weight > 0, pl_every > 1) and the same option, G's gets it with pl_every, as StyleGAN2
// corrects both; otherwise a part keeps lr and betas.
// train_step runs one D and one G update; reducers()/total_bytes() report what was sent.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "autograd/optim.h"
#include "models/gan.h"
#include "models/wrap_mode.h"
#include "reducer/ddp.h"

namespace tandem::models {

struct WrappedGanOptions {
  WrapMode wrap = WrapMode::whole;
  bool explicit_prepare = false;
  double lr = 2e-4;
  std::array<double, 2> betas = {0.5, 0.999};
  bool lazy_r1_correction = true;    // D's (G's) Adam corrected for lazy R1's (path length's) extra updates
  int accumulative_counts = 1;       // both optimizer wrappers (GanModel::train_step)
  ClipGrad clip_grad;                // both optimizer wrappers: each part's averaged gradients
  bool loss_scaling = false;         // a dynamic loss scale per optimizer wrapper (fp16; loss_scaler.h)
  double loss_scale_init = 65536.0;  // with loss_scaling: its scale at the start
  DdpOptions ddp;
};

class WrappedGan {
 public:
  WrappedGan(std::shared_ptr<GanModel> model, std::shared_ptr<dist::ProcessGroup> group,
             const WrappedGanOptions& options);

  LogVars train_step(const Batch& batch);
  std::vector<const Reducer*> reducers() const;
  uint64_t total_bytes() const;  // over every synchronised backward so far
  // Optimizer steps skipped for non-finite averaged gradients (ReducerOptions::non_finite).
  int64_t skipped_steps() const;
  // Averaged gradient elements scrubbed so far (ReducerOptions::non_finite scrub), per part.
  struct Scrubbed {
    int64_t generator = 0, discriminator = 0;
  };
  Scrubbed scrubbed_elements() const;

  GanModel& model() { return *model_; }
  optim::Adam& opt_g() { return *opt_g_; }
  optim::Adam& opt_d() { return *opt_d_; }
  OptimWrapperDict& optim_wrappers() { return wrappers_; }

 private:
  std::shared_ptr<GanModel> model_;
  std::shared_ptr<optim::Adam> opt_g_, opt_d_;
  OptimWrapperDict wrappers_;
  std::unique_ptr<DataParallelWrapper> wrapper_;  // null with WrapMode::none
};

}  // namespace tandem::models
