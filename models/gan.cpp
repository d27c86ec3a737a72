#include "models/gan.h"

#include "autograd/ops.h"

namespace tandem::models {

std::pair<Variable, Variable> GanModel::losses_d(const Variable& real, const Variable& fake_detached) {
  Variable d_fake = discriminate(fake_detached);
  Variable d_real = discriminate(real);
  if (loss == GanLoss::hinge) return {mean(relu(d_fake + 1.0)), mean(relu(-d_real + 1.0))};
  return {mean(softplus(d_fake)), mean(softplus(-d_real))};
}

Variable GanModel::loss_g(const Variable& fake) {
  Variable d_fake = discriminate(fake);
  return loss == GanLoss::hinge ? -mean(d_fake) : mean(softplus(-d_fake));
}

LogVars GanModel::train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) {
  Variable real(prepare_real(batch.inputs));
  Variable z(batch.targets);
  Variable fake = generate(z);

  auto [fake_term, real_term] = losses_d(real, fake.detach());
  Variable loss_d = add(fake_term, real_term);
  OptimWrapper& opt_d = optim_wrappers["discriminator"];
  OptimWrapper& opt_g = optim_wrappers["generator"];
  TANDEM_CHECK(opt_g.accumulative_counts() == opt_d.accumulative_counts(),
               type_name() << ": accumulative_counts of the generator (" << opt_g.accumulative_counts()
                           << ") and of the discriminator (" << opt_d.accumulative_counts()
                           << ") differ; they must be equal: G's micro-steps run on D's micro-batches, "
                              "against D once it has stepped");
  if (!opt_d.accumulating()) {  // zeroing inside an accumulation would drop its micro-batches
    opt_d.zero_grad();          // also what the last G step's backward left in D
    pending_fakes_.clear();
  }
  if (before_backward && opt_d.should_sync()) before_backward(loss_d);
  opt_d.update_params(loss_d);
  LogVars log = {{"loss_d", loss_d.item()}};

  // G steps against the updated D: under accumulation its micro-steps wait for D's step.
  pending_fakes_.push_back(fake);
  if (opt_d.accumulating()) return log;
  double loss_g_sum = 0.0;
  for (const Variable& pending : pending_fakes_) {
    Variable g = loss_g(pending);
    if (!opt_g.accumulating()) opt_g.zero_grad();
    if (before_backward && opt_g.should_sync()) before_backward(g);
    opt_g.update_params(g);
    loss_g_sum += g.item();
  }
  log["loss_g"] = loss_g_sum / static_cast<double>(pending_fakes_.size());
  pending_fakes_.clear();
  TANDEM_CHECK(
      !opt_g.accumulating(),
      type_name() << ": the generator's optimizer wrapper did not step with the discriminator's; give "
                     "both the same initialize_count_status");
  return log;
}

}  // namespace tandem::models
