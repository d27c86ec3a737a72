// GAN models trained through the data-parallel wrappers.
//
// Contract:
// - A GanModel is a DataParallelModel with two children, `generator` and
//   `discriminator`, so whole-model and per-part wrapping both apply.
// - train_step(batch, wrappers) performs one D update, then one G update when the iteration
//   (set_iteration) ends a group of n_critic D steps ((i + 1) % n_critic == 0; every
//   iteration with the default 1), MMGeneration style: batch.inputs is this rank's real
//   data, batch.targets its noise, batch.aux (wgan-gp only) its interpolation coefficients,
//   one per sample in [0, 1]; wrappers "discriminator" and "generator" step their part. The
//   D step's G forward runs inside it with its output detached. The G step's backward is
//   scoped to G's parameters (OptimWrapper::update_params, backward_inputs()): it writes no
//   D gradient and the Reducer synchronises G's alone (D is not frozen; its gradients are
//   cleared before the next D step all the same).
// - Losses (losses_d, loss_d, loss_g): non-saturating (softplus) by default; hinge; wgan-gp
//   (critic: mean D(fake) - mean D(real); generator: -mean D(fake)); relativistic (RpGAN,
//   R3GAN's pairing loss): with D's outputs r_i on the reals and f_i on the fakes of this
//   rank's batch, paired by index, D's loss is mean_i softplus(f_i - r_i) and G's
//   mean_i softplus(r_i - f_i). The G step then judges its micro-batch's reals too: D(real)
//   is computed without a graph (NoGradGuard), since G's update needs its value alone and
//   the scoped backward would not reach D anyway. Pairs never cross ranks, so with equal
//   per-rank batches the mean over the global batch is the mean of the ranks' means, which
//   the Reducer's average takes: N ranks train as one process on the global batch (the
//   pairing is rank r's i-th real with rank r's i-th fake, i.e. the global batch's rows in
//   rank order).
// - Penalties (gradient_penalty.h): wgan-gp adds gp_lambda times the gradient penalty on
//   interpolates of real and detached fake samples to the D loss. With r1_gamma > 0, R1
//   (r1_gamma / 2 times the mean squared gradient norm on the reals) joins the D loss of
//   every D step when r1_every is 1; otherwise every r1_every-th D step (iteration %
//   r1_every == 0) is followed by a D update of the penalty alone, scaled by r1_every (lazy
//   regularisation: its backward is a phase of its own for the Reducer). D then takes
//   r1_every + 1 updates in every r1_every iterations; StyleGAN2's correction for that is
//   lazy_regularization_adam (below), which WrappedGan applies to D's Adam by default
//   (WrappedGanOptions::lazy_r1_correction). With r2_gamma > 0, R2 (r2_gamma / 2 times the
//   mean squared gradient norm of D's output on the fakes with respect to the detached fake
//   samples) joins the D loss of every D step, whatever r1_every (R2 is never lazy). R3GAN
//   trains with R1 and R2 at the same gamma. Both apply to every loss. With pl_weight > 0
//   (models with per-layer latents: generate_styled), every pl_every-th G step (G step g,
//   counted from 0, with g % pl_every == 0) is followed by a G update of the path-length
//   penalty alone (path_length.h) on every pl_batch_shrink-th noise row of this batch (rows
//   whose global index is a multiple of k: the same rows at any rank count, as StyleGAN2's
//   pl_batch_shrink halves its batch), scaled by pl_weight * pl_every:
//   a phase of its own for the Reducer, as StyleGAN2's lazy Gpl. Its running mean is a
//   buffer of the model, its noise part of z's rows (the model's noise_dim includes it).
// - Penalties under a loss scale (fp16: a LossScaler on D's wrapper): the scaler multiplies
//   the whole D loss, penalties included, in the outer backward. The penalties' inner
//   gradient (WGAN-GP, R1, lazy R1, R2) runs unscaled by default, the recipe MMagic's
//   StyleGAN2 trained stably with; scale_penalties takes it under D's current scale and
//   unscales it (PyTorch AMP's recipe, gradient_penalty.h's inner_scale). Without a scaler
//   it changes nothing. The path-length penalty's inner gradient always runs unscaled.
// - The log values: loss_d (without the penalties), loss_g (of the latest G step; 0 before
//   the first), and when they apply gp, wdist (mean D(real) - mean D(fake), the critic's
//   Wasserstein estimate), r1 (the latest R1 value), r2 (this step's), pl and pl_mean (the
//   latest path-length penalty and running mean); grad_norm_d and
//   grad_norm_g when that part's wrapper clips gradients (OptimWrapper ClipGrad): the norm
//   before clipping at its latest step (0 before the first), the same on every rank.
// - Accumulation (OptimWrapper accumulative_counts k, equal for both wrappers, else an
//   Error): gradients are zeroed only when no accumulation is under way. Each train_step
//   is a D micro-step; G's micro-steps, one per micro-batch (its fake samples kept),
//   run in the train_step where D steps, against the updated D. So k train_steps equal
//   one train_step on their concatenated batches (for models without batch norm), and
//   with initialize_count_status on both wrappers the run's last, partial accumulation
//   steps at its last train_step. While D accumulates, loss_g is not logged; in the
//   train_step that updates G it is the mean over its micro-steps. Accumulation with
//   n_critic > 1, lazy R1 or path length is an Error (not supported yet). With the relativistic loss each
//   pending micro-batch keeps its reals, so that G's k-th micro-step pairs its fakes with
//   the reals they were drawn alongside.
// - Image models (mlp, dcgan, dcgan64, pggan) take GanConfig::channels per pixel, 1 (gray)
//   or 3 (RGB), in their data, their D's input and their G's output; ring8-mlp takes 1 only.
//   dcgan64 takes [C, 64, 64] samples (the data is resized to it), the others [C, 28, 28];
//   GanConfig::width sets dcgan64's ngf = ndf (0: 64) and is an Error for other models.
//   dcgan and dcgan64 fuse each biased layer with its activation (models/fused_layers.h).
// - set_iteration(i) lets dynamic models change structure (the `mlp` model's extra D layer
//   on alternate blocks of 5 iterations; the progressive GAN's stages and fade-in). Every
//   rank calls it with the same i, so every rank uses the same parameters.
// - Inside a step captured into a CUDA graph (runtime/step_capture.h), and in every step
//   while defer_log_reads is set, train_step reads no value on the host: its log holds NaN
//   for loss_d, loss_g, gp, wdist, r1 and r2, and the tensors they are computed into are
//   kept; read_device_log(log) fills those entries from the latest step (or launch) that wrote
//   each (it waits for the device). A GPU step that reads its losses on the host waits for
//   the device twice per step (runtime/host_cost.h); a training loop that logs every N
//   steps sets defer_log_reads and reads at its log points. Under gradient accumulation the
//   deferred loss_g is that of the last micro-step. n_critic > 1, lazy R1 and path length
//   change the step from one iteration to the next and are refused in a capture; path
//   length reads its lengths on the host (its running mean) in every step that takes it.
// - augment (diff_augment.h), when set, is applied to every batch D sees: (*augment)(x,
//   iteration, call) on D's reals (kAugmentReal; R1, lazy R1 and WGAN-GP's interpolates
//   take those augmented reals too, R1 differentiating through the augmentation back to the
//   reals), D's detached fakes (kAugmentFake; R2 takes them, differentiating back to the
//   detached fakes), the fakes of G's k-th micro-step (kAugmentGenerator + k) and, with the
//   relativistic loss, the reals D judges in that micro-step (kAugmentGeneratorReal + k).
//   With augment->track_real_signs, D(augmented reals) of each D step is recorded
//   (record_real_logits). Refused inside a captured step (its parameters are drawn on the
//   host every iteration).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "autograd/optim.h"
#include "models/diff_augment.h"
#include "models/gan_loss.h"
#include "reducer/ddp.h"

namespace tandem::models {

// How a GAN's two parts are trained: the loss, the penalties and the D steps per G step.
struct GanObjective {
  GanLoss loss = GanLoss::non_saturating;
  double gp_lambda = 10.0;       // wgan-gp: the gradient penalty's weight
  int64_t n_critic = 1;          // D steps per G step
  double r1_gamma = 0.0;         // R1 on the reals; 0: off
  int64_t r1_every = 1;          // R1 every this many D steps, scaled by it
  double r2_gamma = 0.0;         // R2 on the fakes, in every D loss; 0: off
  double pl_weight = 0.0;        // path-length regularisation of G (models/path_length.h); 0: off
  int64_t pl_every = 4;          // a G update of the path-length penalty alone every this many G steps
  double pl_decay = 0.01;        // the running mean path length's update rate
  int64_t pl_batch_shrink = 2;   // the path-length step takes every k-th row of the batch
  bool scale_penalties = false;  // with a loss scaler on D: the penalties' inner gradient under it
};

struct GanConfig {
  std::string model = "ring8-mlp";  // ring8-mlp | mlp | dcgan | dcgan64 | pggan | r3gan
  bool dynamic = false;             // mlp only: the extra D layer on alternate blocks of 5
  GanObjective objective = {};
  int64_t pggan_stage_iters = 200;                    // pggan: iterations per stage (first half fades in)
  uint64_t seed = 0;                                  // initial weights
  int64_t channels = 1;                               // image models: 1 (gray) or 3 (RGB) per pixel
  int64_t width = 0;                                  // dcgan64: ngf = ndf; 0: 64
  std::optional<double> style_mixing = std::nullopt;  // stylegan2's style mixing probability; unset: 0.9
  DType precision = DType::f32;                       // set_low_precision's dtype
  int64_t low_precision_res = -1;                     // and resolutions (-1: all)
};

// The hook GanModel calls right before each backward: with the loss and the parameters
// that backward writes (its optimizer wrapper's backward_inputs()). A callable taking the
// loss alone is accepted too (it then prepares for every parameter the loss reaches).
class BeforeBackward {
 public:
  using Fn = std::function<void(const Variable& loss, const std::vector<Variable>& inputs)>;
  BeforeBackward() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, BeforeBackward>>>
  BeforeBackward(F f) {  // NOLINT: implicit, so a lambda can be assigned
    if constexpr (std::is_invocable_v<F&, const Variable&, const std::vector<Variable>&>) {
      fn_ = std::move(f);
    } else {
      fn_ = [f = std::move(f)](const Variable& loss, const std::vector<Variable>&) { f(loss); };
    }
  }
  explicit operator bool() const { return static_cast<bool>(fn_); }
  void operator()(const Variable& loss, const std::vector<Variable>& inputs) const { fn_(loss, inputs); }

 private:
  Fn fn_;
};

class GanModel : public DataParallelModel {
 public:
  // The generator as sampled (pictures, FID).
  virtual Variable generate(const Variable& z) = 0;
  // The generator as train_step runs it (StyleGAN2's run_G): generate(z) but for training's
  // own regularisers (stylegan2's style mixing).
  virtual Variable generate_training(const Variable& z) { return generate(z); }
  virtual Variable discriminate(const Variable& x) = 0;
  virtual int64_t noise_dim() const = 0;
  // A generator with a mapping network: its images for z as generate_training makes them, the per-layer
  // latents ws [N, layers, w_dim] they were made from, the path-length noise (z's columns for it, [N, C, H,
  // W]) and a handle on the running mean path length (a scalar buffer of the model). The others: an Error
  // naming the model (their generator takes no styles).
  struct StyledImages {
    Variable images, ws;
    Tensor path_noise, path_mean;
  };
  virtual StyledImages generate_styled(const Variable& z);
  // Shape of one real sample as the discriminator takes it at the current iteration.
  virtual Shape sample_shape() const = 0;
  // Shape of one real sample as the data must provide it: [channels, 28, 28] for the image
  // models (pggan at its last stage), [channels, 64, 64] for dcgan64, [2] for ring8.
  virtual Shape data_shape() const { return sample_shape(); }
  // Real data at full resolution -> what the discriminator takes now (pggan downsamples).
  virtual Tensor prepare_real(const Tensor& real) const { return real; }
  virtual void set_iteration(int64_t iteration) { iteration_ = iteration; }
  // True for models whose samples are images (a PNG grid), false for 2-D points.
  virtual bool is_image_model() const { return true; }
  // A short description of the structure in use ("stage 1 (14x14), alpha 0.40").
  virtual std::string structure() const { return ""; }
  // Everything about the structure that a step's kernels take from the host: equal keys
  // mean a captured step replays exactly (models/train/step_graph_policy.h). structure()
  // unless a model's description rounds something off (pggan's alpha).
  virtual std::string step_key() const { return structure(); }
  // The layers that run at one resolution each, with the side of the images they work at
  // (G: the side they make; D: the side they read), for set_low_precision; empty for a
  // model whose layers are not each of one resolution.
  struct ResolutionLayer {
    int64_t side;
    nn::Module* layer;
  };
  virtual std::vector<ResolutionLayer> resolution_layers() { return {}; }

  LogVars train_step(const Batch& batch, OptimWrapperDict& optim_wrappers) override;
  // The D loss's fake and real terms from the critic's outputs, for the losses whose terms
  // separate (an Error for the relativistic loss, whose pairs do not split).
  std::pair<Variable, Variable> losses_d(const Variable& d_real, const Variable& d_fake) const;
  // The D loss from the critic's outputs on this batch's reals and fakes (for the
  // relativistic loss the same shape, paired by row; else an Error naming both shapes).
  Variable loss_d(const Variable& d_real, const Variable& d_fake) const;
  // The G loss of `fake` through D. The relativistic loss needs `d_real`, D's outputs on the
  // reals paired with `fake` (taken as constants); the others ignore it.
  Variable loss_g(const Variable& fake, const Variable& d_real = {});

  GanObjective objective = {};
  // `log` (a deferred step's, or a capture's) with the values its step wrote (see above).
  LogVars read_device_log(LogVars log) const;
  bool defer_log_reads = false;

  // Called with each loss right before its backward when set: the MMGeneration-style
  // explicit reducer.prepare_for_backward(loss, inputs).
  BeforeBackward before_backward;
  std::shared_ptr<nn::Module> generator;
  std::shared_ptr<nn::Module> discriminator;
  std::shared_ptr<DiffAugment> augment;  // null: D sees the images as they are

 protected:
  int64_t iteration_ = 0;

 private:
  // An update of one part: zero_grad, before_backward, backward and step.
  void update(OptimWrapperDict& optim_wrappers, const char* part, const Variable& loss);

  // v's value for the log: now, or NaN inside a capture or with defer_log_reads (the
  // tensor kept in device_log_).
  double log_value(const char* name, const Variable& v);
  // x through augment for this iteration's `call`, or x when no augment is set.
  Variable augmented(const Variable& x, int64_t call) const;

  // The inner scale of D's penalties: D's loss scale with scale_penalties and a scaler, else 1.
  double penalty_scale(const OptimWrapper& opt_d) const;
  // The D loss with its penalties for one D step (logging loss_d and the penalty terms).
  Variable d_step_loss(const Batch& batch, const Variable& real, const Variable& fake, double inner_scale,
                       LogVars& log);
  // G's updates against the updated D, one per pending micro-batch; returns loss_g's mean.
  double g_steps(OptimWrapper& opt_g);

  std::vector<Variable> pending_fakes_;  // G's micro-batches waiting for D's step
  std::vector<Tensor> pending_reals_;    // relativistic: the reals of each pending micro-batch
  std::map<std::string, Tensor> device_log_;
  // The lazy path-length update after G step g (see above), when due.
  void path_length_step(const Batch& batch, OptimWrapperDict& optim_wrappers, int64_t g);

  double last_loss_g_ = 0.0, last_r1_ = 0.0, last_pl_ = 0.0, last_pl_mean_ = 0.0;
};

// Lazy regularisation's correction of a part's Adam (StyleGAN2, Karras et al. 2020, appendix
// B): with a penalty-only update every `every` steps the part takes every + 1 updates per
// `every` iterations, so it gets lr * c and betas beta^c, c = every / (every + 1), as in
// StyleGAN2's `mb_ratio = reg_interval / (reg_interval + 1)`. every 1 returns `adam` as it
// is; every < 1 is an Error. eps and weight_decay are kept.
optim::AdamOptions lazy_regularization_adam(optim::AdamOptions adam, int64_t every);

// Builds a model by name; an Error lists the known names. An objective out of range, or a
// penalty on a critic with batch norm, is an Error naming the setting (and the model).
std::shared_ptr<GanModel> make_gan(const GanConfig& config);

// Gives the model's layers the compute dtype `dtype` (autograd/precision.h): every layer
// when `resolutions` is -1, else the layers of the `resolutions` highest sides of
// resolution_layers() (StyleGAN's num_fp16_res: the high resolutions hold most of the work
// and the least sensitive values). An Error naming the model when it has no such layers.
void set_low_precision(GanModel& model, DType dtype, int64_t resolutions);
// The same for layers a program lists itself (a model of its own around tandem's networks,
// e.g. r3gan_resolution_layers): the layers of the `resolutions` (at least 1) highest sides
// get `dtype`; `what` names the model in the errors.
void set_low_precision(const std::vector<GanModel::ResolutionLayer>& layers, DType dtype, int64_t resolutions,
                       const std::string& what);

const std::vector<std::string>& gan_model_names();

}  // namespace tandem::models
