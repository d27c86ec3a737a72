#include "models/gan.h"

#include <cmath>
#include <limits>
#include <optional>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "models/gradient_penalty.h"
#include "models/path_length.h"
#include "runtime/step_capture.h"
#include "runtime/trace.h"

namespace tandem::models {

namespace {

// The relativistic loss pairs D's outputs on the reals and on the fakes by row.
void check_pairs(const Variable& d_real, const Variable& d_fake) {
  TANDEM_CHECK(d_real.shape() == d_fake.shape(), "rpgan: D's outputs on the reals "
                                                     << shape_str(d_real.shape()) << " and on the fakes "
                                                     << shape_str(d_fake.shape())
                                                     << " do not pair by index (a batch must hold as many "
                                                        "fakes as reals)");
}

// The gradient norms before clipping, of each part's latest step (0 before its first), for
// the parts whose wrapper clips.
void add_grad_norms(LogVars& log, const OptimWrapper& opt_d, const OptimWrapper& opt_g) {
  if (opt_d.clip_grad().max_norm > 0) log["grad_norm_d"] = opt_d.last_grad_norm().value_or(0.0);
  if (opt_g.clip_grad().max_norm > 0) log["grad_norm_g"] = opt_g.last_grad_norm().value_or(0.0);
}

}  // namespace

std::pair<Variable, Variable> GanModel::losses_d(const Variable& d_real, const Variable& d_fake) const {
  switch (objective.loss) {
    case GanLoss::hinge:
      return {mean(relu(d_fake + 1.0)), mean(relu(-d_real + 1.0))};
    case GanLoss::wgan_gp:
      return {mean(d_fake), -mean(d_real)};
    case GanLoss::relativistic:
      TANDEM_FAIL(
          "losses_d: the relativistic loss pairs reals with fakes, its terms do not separate; "
          "take loss_d");
    case GanLoss::non_saturating:
      break;
  }
  return {mean(softplus(d_fake)), mean(softplus(-d_real))};
}

Variable GanModel::loss_d(const Variable& d_real, const Variable& d_fake) const {
  if (objective.loss != GanLoss::relativistic) {
    auto [fake_term, real_term] = losses_d(d_real, d_fake);
    return add(fake_term, real_term);
  }
  check_pairs(d_real, d_fake);
  return mean(softplus(d_fake - d_real));
}

Variable GanModel::loss_g(const Variable& fake, const Variable& d_real) {
  Variable d_fake = discriminate(fake);
  switch (objective.loss) {
    case GanLoss::relativistic:
      TANDEM_CHECK(d_real.defined(),
                   "loss_g: the relativistic loss needs D's outputs on the reals paired with the fakes");
      check_pairs(d_real, d_fake);
      return mean(softplus(d_real.detach() - d_fake));
    case GanLoss::non_saturating:
      return mean(softplus(-d_fake));
    case GanLoss::hinge:
    case GanLoss::wgan_gp:
      break;
  }
  return -mean(d_fake);
}

void GanModel::update(OptimWrapperDict& optim_wrappers, const char* part, const Variable& loss) {
  OptimWrapper& wrapper = optim_wrappers[part];
  wrapper.zero_grad();
  if (before_backward) before_backward(loss, wrapper.backward_inputs());
  wrapper.update_params(loss);
}

double GanModel::log_value(const char* name, const Variable& v) {
  if (active_capture() == nullptr && !defer_log_reads) return v.item();
  device_log_[name] = v.data();  // a graph writes it at every replay
  return std::numeric_limits<double>::quiet_NaN();
}

Variable GanModel::augmented(const Variable& x, int64_t call) const {
  if (!augment) return x;
  // A D that takes flat rows (mlp) sees pictures all the same: augment those.
  Shape images = sample_shape();
  images.insert(images.begin(), x.size(0));
  return reshape((*augment)(reshape(x, images), iteration_, call), x.shape());
}

LogVars GanModel::read_device_log(LogVars log) const {
  for (const auto& [name, value] : device_log_) {
    auto entry = log.find(name);
    if (entry != log.end() && std::isnan(entry->second)) entry->second = value.item();
  }
  return log;
}

GanModel::StyledImages GanModel::generate_styled(const Variable&) {
  TANDEM_FAIL(type_name() << ": path-length regularisation needs a generator with a mapping network "
                             "(per-layer latents: stylegan2); this model's generator takes no styles");
}

void GanModel::path_length_step(const Batch& batch, OptimWrapperDict& optim_wrappers, int64_t g) {
  const GanObjective& o = objective;
  if (o.pl_weight <= 0 || g % o.pl_every != 0) return;
  trace::Span span("train", "path length (G)");
  OptimWrapper& opt_g = optim_wrappers["generator"];
  // The running mean is averaged over the ranks that average G's gradients.
  dist::ProcessGroup* group = opt_g.reducers().empty() ? nullptr : &opt_g.reducers().front()->group();
  // Every k-th row: rank r's rows start at a multiple of its batch, which k divides.
  const Tensor& z = batch.targets;
  const int64_t n = z.size(0), k = o.pl_batch_shrink;
  TANDEM_CHECK(n % k == 0, type_name()
                               << ": path length takes every " << k << "-th row (pl_batch_shrink) of a " << n
                               << "-row batch; a rank's batch must be a multiple of " << k);
  Variable rows = k == 1 ? Variable(z) : slice(Variable(z.reshape({n / k, k * z.size(1)})), 1, 0, z.size(1));
  StyledImages styled = generate_styled(Variable(rows.data()));
  const PathLengthTerm term =
      path_length_penalty(styled.images, styled.ws, styled.path_noise, styled.path_mean, o.pl_decay, group);
  update(optim_wrappers, "generator", o.pl_weight * static_cast<double>(o.pl_every) * term.loss);
  last_pl_ = term.penalty;
  last_pl_mean_ = term.mean;
}

double GanModel::penalty_scale(const OptimWrapper& opt_d) const {
  const optim::LossScaler* scaler = opt_d.loss_scaler();
  return objective.scale_penalties && scaler != nullptr ? scaler->scale() : 1.0;
}

optim::AdamOptions lazy_regularization_adam(optim::AdamOptions adam, int64_t every) {
  TANDEM_CHECK(every >= 1, "lazy regularisation every " << every << " steps: must be at least 1");
  if (every == 1) return adam;
  const double c = static_cast<double>(every) / static_cast<double>(every + 1);
  adam.lr *= c;
  for (double& beta : adam.betas) beta = std::pow(beta, c);
  return adam;
}

Variable GanModel::d_step_loss(const Batch& batch, const Variable& real, const Variable& fake,
                               double inner_scale, LogVars& log) {
  const GanObjective& o = objective;
  // R2 differentiates D(fake) with respect to the detached fakes.
  Variable fake_leaf(fake.data(), /*requires_grad=*/o.r2_gamma > 0);
  Variable real_seen = augmented(real, kAugmentReal), fake_seen = augmented(fake_leaf, kAugmentFake);
  Variable d_real = discriminate(real_seen);
  if (augment && augment->track_real_signs) augment->record_real_logits(d_real);
  Variable d_fake = discriminate(fake_seen);
  Variable loss = loss_d(d_real, d_fake);
  log["loss_d"] = log_value("loss_d", loss);
  Variable total = loss;
  if (o.loss == GanLoss::wgan_gp) {
    TANDEM_CHECK(batch.aux.defined(),
                 "wgan-gp: the batch carries no interpolation coefficients (Batch::aux)");
    Variable x_hat = interpolate(real_seen.data(), fake_seen.data(), batch.aux);
    Variable gp = wgan_gp_penalty(discriminate(x_hat), x_hat, inner_scale);
    total = total + o.gp_lambda * gp;
    log["gp"] = log_value("gp", gp);
    log["wdist"] = log_value("wdist", -loss);
  }
  if (real.requires_grad()) {  // R1 in every D step
    Variable r1 = r1_penalty(d_real, real, inner_scale);
    total = total + o.r1_gamma / 2 * r1;
    last_r1_ = log_value("r1", r1);
  }
  if (o.r2_gamma > 0) {
    Variable r2 = r1_penalty(d_fake, fake_leaf, inner_scale);  // the same zero-centred penalty, on the fakes
    total = total + o.r2_gamma / 2 * r2;
    log["r2"] = log_value("r2", r2);
  }
  return total;
}

double GanModel::g_steps(OptimWrapper& opt_g) {
  double loss_g_sum = 0.0;
  for (size_t k = 0; k < pending_fakes_.size(); ++k) {
    const auto micro = static_cast<int64_t>(k);
    std::optional<trace::Span> forward_g(std::in_place, "train", "forward (G step)");
    Variable d_real;
    if (objective.loss == GanLoss::relativistic) {
      NoGradGuard no_grad;  // G's update takes D(real)'s value alone
      d_real = discriminate(augmented(Variable(pending_reals_[k]), kAugmentGeneratorReal + micro));
    }
    Variable g = loss_g(augmented(pending_fakes_[k], kAugmentGenerator + micro), d_real);
    forward_g.reset();
    if (!opt_g.accumulating()) opt_g.zero_grad();
    if (before_backward && opt_g.should_sync()) before_backward(g, opt_g.backward_inputs());
    opt_g.update_params(g);
    loss_g_sum += log_value("loss_g", g);
  }
  const double mean_loss_g = loss_g_sum / static_cast<double>(pending_fakes_.size());
  pending_fakes_.clear();
  pending_reals_.clear();
  return mean_loss_g;
}

LogVars GanModel::train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) {
  const GanObjective& o = objective;
  if (active_capture() != nullptr) {
    TANDEM_CHECK(o.n_critic == 1 && !(o.r1_gamma > 0 && o.r1_every > 1) && o.pl_weight == 0,
                 type_name() << ": a step captured into a CUDA graph must be the same at every iteration; "
                             << "n_critic " << o.n_critic << ", lazy R1 (r1_every " << o.r1_every
                             << ") and path length (pl_weight " << o.pl_weight
                             << ") change it from one iteration to the next");
    TANDEM_CHECK(!augment, type_name() << ": augmentation draws its parameters on the host at every "
                                          "iteration; a step captured into a CUDA graph cannot repeat that");
    device_log_.clear();
  }
  std::optional<trace::Span> forward_d(std::in_place, "train", "forward (D step)");
  // R1 every step differentiates D(real) with respect to the reals.
  Variable real(prepare_real(batch.inputs), /*requires_grad=*/o.r1_gamma > 0 && o.r1_every == 1);
  Variable fake = generate_training(Variable(batch.targets));
  OptimWrapper& opt_d = optim_wrappers["discriminator"];
  OptimWrapper& opt_g = optim_wrappers["generator"];
  LogVars log;
  Variable total_d = d_step_loss(batch, real, fake, penalty_scale(opt_d), log);
  forward_d.reset();

  TANDEM_CHECK(opt_g.accumulative_counts() == opt_d.accumulative_counts(),
               type_name() << ": accumulative_counts of the generator (" << opt_g.accumulative_counts()
                           << ") and of the discriminator (" << opt_d.accumulative_counts()
                           << ") differ; they must be equal: G's micro-steps run on D's micro-batches, "
                              "against D once it has stepped");
  const bool lazy_r1 = o.r1_gamma > 0 && o.r1_every > 1;
  TANDEM_CHECK(opt_d.accumulative_counts() == 1 || (o.n_critic == 1 && !lazy_r1 && o.pl_weight == 0),
               type_name() << ": gradient accumulation (accumulative_counts " << opt_d.accumulative_counts()
                           << ") together with n_critic " << o.n_critic << ", lazy R1 (r1_every "
                           << o.r1_every << ") or path length (pl_weight " << o.pl_weight
                           << ") is not supported; use one or the other");
  if (!opt_d.accumulating()) {  // zeroing inside an accumulation would drop its micro-batches
    opt_d.zero_grad();          // the G step (scoped to G: update_params) left D's as they were
    pending_fakes_.clear();
    pending_reals_.clear();
  }
  if (before_backward && opt_d.should_sync()) before_backward(total_d, opt_d.backward_inputs());
  opt_d.update_params(total_d);
  if (lazy_r1 && iteration_ % o.r1_every == 0) {
    Variable x(real.data(), /*requires_grad=*/true);
    Variable r1 = r1_penalty(discriminate(augmented(x, kAugmentReal)), x, penalty_scale(opt_d));
    update(optim_wrappers, "discriminator", static_cast<double>(o.r1_every) * o.r1_gamma / 2 * r1);
    last_r1_ = log_value("r1", r1);
  }
  if (o.r1_gamma > 0) log["r1"] = last_r1_;

  if ((iteration_ + 1) % o.n_critic == 0) {
    // G steps against the updated D: under accumulation its micro-steps wait for D's step.
    pending_fakes_.push_back(fake);
    if (o.loss == GanLoss::relativistic) pending_reals_.push_back(real.data());
    if (opt_d.accumulating()) {
      add_grad_norms(log, opt_d, opt_g);
      return log;
    }
    last_loss_g_ = g_steps(opt_g);
    TANDEM_CHECK(
        !opt_g.accumulating(),
        type_name() << ": the generator's optimizer wrapper did not step with the discriminator's; give "
                       "both the same initialize_count_status");
    path_length_step(batch, optim_wrappers, (iteration_ + 1) / o.n_critic - 1);
  }
  log["loss_g"] = last_loss_g_;
  if (o.pl_weight > 0) {
    log["pl"] = last_pl_;
    log["pl_mean"] = last_pl_mean_;
  }
  add_grad_norms(log, opt_d, opt_g);
  return log;
}

}  // namespace tandem::models
