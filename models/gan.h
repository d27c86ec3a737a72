// GAN models trained through the data-parallel wrappers.
//
// Contract:
// - A GanModel is a DataParallelModel with two children, `generator` and
//   `discriminator`, so whole-model and per-part wrapping both apply.
// - train_step(batch, wrappers) performs one D update then one G update, MMGeneration
//   style: batch.inputs is this rank's real data, batch.targets its noise; wrappers
//   "discriminator" and "generator" step their part. The D step's G forward runs inside it
//   with its output detached; the G step's backward reaches D too (D is not frozen, as in
//   the reference PyTorch loop) and D's gradients are cleared before the next D step.
// - Accumulation (OptimWrapper accumulative_counts k, equal for both wrappers, else an
//   Error): gradients are zeroed only when no accumulation is under way. Each train_step
//   is a D micro-step; G's micro-steps, one per micro-batch (its fake samples kept),
//   run in the train_step where D steps, against the updated D. So k train_steps equal
//   one train_step on their concatenated batches (for models without batch norm), and
//   with initialize_count_status on both wrappers the run's last, partial accumulation
//   steps at its last train_step. loss_g is logged in the train_steps that update G (the
//   mean over its micro-steps), loss_d in every one.
// - set_iteration(i) lets dynamic models change structure (the `mlp` model's extra D layer
//   on alternate blocks of 5 iterations; the progressive GAN's stages and fade-in). Every
//   rank calls it with the same i, so every rank uses the same parameters.
// - Losses: non-saturating (softplus) by default, hinge as an option.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reducer/ddp.h"

namespace tandem::models {

enum class GanLoss { non_saturating, hinge };

struct GanConfig {
  std::string model = "ring8-mlp";  // ring8-mlp | mlp | dcgan | pggan
  bool dynamic = false;             // mlp only: the extra D layer on alternate blocks of 5
  GanLoss loss = GanLoss::non_saturating;
  int64_t pggan_stage_iters = 200;  // pggan: iterations per stage (first half fades in)
  uint64_t seed = 0;                // initial weights
};

class GanModel : public DataParallelModel {
 public:
  virtual Variable generate(const Variable& z) = 0;
  virtual Variable discriminate(const Variable& x) = 0;
  virtual int64_t noise_dim() const = 0;
  // Shape of one real sample as the discriminator takes it at the current iteration.
  virtual Shape sample_shape() const = 0;
  // Real data at full resolution -> what the discriminator takes now (pggan downsamples).
  virtual Tensor prepare_real(const Tensor& real) const { return real; }
  virtual void set_iteration(int64_t iteration) { iteration_ = iteration; }
  // True for models whose samples are images (a PNG grid), false for 2-D points.
  virtual bool is_image_model() const { return true; }
  // A short description of the structure in use ("stage 1 (14x14), alpha 0.40").
  virtual std::string structure() const { return ""; }

  LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) override;
  std::pair<Variable, Variable> losses_d(const Variable& real, const Variable& fake_detached);
  Variable loss_g(const Variable& fake);

  GanLoss loss = GanLoss::non_saturating;
  // Called with each loss right before its backward when set: the MMGeneration-style
  // explicit reducer.prepare_for_backward(loss).
  std::function<void(const Variable&)> before_backward;
  std::shared_ptr<nn::Module> generator;
  std::shared_ptr<nn::Module> discriminator;

 protected:
  int64_t iteration_ = 0;

 private:
  std::vector<Variable> pending_fakes_;  // G's micro-batches waiting for D's step
};

// Builds a model by name; an Error lists the known names.
std::shared_ptr<GanModel> make_gan(const GanConfig& config);
const std::vector<std::string>& gan_model_names();

}  // namespace tandem::models
