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
  opt_d.zero_grad();
  if (before_backward) before_backward(loss_d);
  opt_d.update_params(loss_d);

  Variable g = loss_g(fake);
  OptimWrapper& opt_g = optim_wrappers["generator"];
  opt_g.zero_grad();
  if (before_backward) before_backward(g);
  opt_g.update_params(g);
  return {{"loss_d", loss_d.item()}, {"loss_g", g.item()}};
}

}  // namespace tandem::models
