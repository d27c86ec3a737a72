#include "models/wrapped_gan.h"

#include <set>

namespace tandem::models {

WrappedGan::WrappedGan(std::shared_ptr<GanModel> model, std::shared_ptr<dist::ProcessGroup> group,
                       const WrappedGanOptions& options)
    : model_(std::move(model)) {
  TANDEM_CHECK(!options.explicit_prepare || options.wrap == WrapMode::whole,
               "explicit prepare_for_backward goes with the whole-model wrap, not '"
                   << wrap_mode_name(options.wrap) << "'");
  const GanObjective& o = model_->objective;
  const bool lazy_r1 = o.r1_gamma > 0 && o.r1_every > 1;
  const bool lazy_pl = o.pl_weight > 0 && o.pl_every > 1;
  opt_g_ = std::make_shared<optim::Adam>(
      model_->generator->parameters(),
      lazy_regularization_adam({.lr = options.lr, .betas = options.betas},
                               lazy_pl && options.lazy_r1_correction ? o.pl_every : 1));
  opt_d_ = std::make_shared<optim::Adam>(
      model_->discriminator->parameters(),
      lazy_regularization_adam({.lr = options.lr, .betas = options.betas},
                               lazy_r1 && options.lazy_r1_correction ? o.r1_every : 1));
  wrappers_.add("generator",
                std::make_shared<OptimWrapper>(opt_g_, options.accumulative_counts, options.clip_grad));
  wrappers_.add("discriminator",
                std::make_shared<OptimWrapper>(opt_d_, options.accumulative_counts, options.clip_grad));
  if (options.loss_scaling) {  // G and D decide on their own (loss_scaler.h)
    for (const char* part : {"generator", "discriminator"})
      wrappers_[part].set_loss_scaler(std::make_shared<optim::LossScaler>(
          optim::LossScalerOptions{.init_scale = options.loss_scale_init}));
  }
  if (options.wrap == WrapMode::whole) {
    auto whole = std::make_unique<DistributedDataParallel>(model_, group, options.ddp);
    if (options.explicit_prepare) {
      Reducer* reducer = &whole->reducer();
      model_->before_backward = [reducer](const Variable& loss, const std::vector<Variable>& inputs) {
        reducer->prepare_for_backward({loss}, inputs);
      };
    }
    wrapper_ = std::move(whole);
  } else if (options.wrap == WrapMode::separate) {
    wrapper_ = std::make_unique<SeparateDistributedDataParallel>(model_, group, options.ddp);
  }
}

LogVars WrappedGan::train_step(const Batch& batch) {
  return wrapper_ ? wrapper_->train_step(batch, wrappers_) : model_->train_step(batch, wrappers_);
}

std::vector<const Reducer*> WrappedGan::reducers() const {
  return wrapper_ ? wrapper_->all_reducers() : std::vector<const Reducer*>{};
}

uint64_t WrappedGan::total_bytes() const {
  uint64_t sum = 0;
  for (const Reducer* r : reducers()) sum += r->total_bytes();
  return sum;
}

int64_t WrappedGan::skipped_steps() const {
  int64_t n = 0;
  for (const auto& [name, wrapper] : wrappers_.items()) n += wrapper->skipped_steps();
  return n;
}

WrappedGan::Scrubbed WrappedGan::scrubbed_elements() const {
  std::set<const VariableImpl*> generator;
  for (const Variable& p : model_->generator->parameters()) generator.insert(p.impl());
  Scrubbed sum;
  for (const Reducer* r : reducers()) {
    const std::vector<int64_t>& counts = r->scrubbed_elements();
    for (size_t i = 0; i < counts.size(); ++i)
      (generator.count(r->parameters()[i].impl()) ? sum.generator : sum.discriminator) += counts[i];
  }
  return sum;
}

}  // namespace tandem::models
