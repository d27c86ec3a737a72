// Command-line options of tandem-train: one table of flags (runtime/command_line.h) and the
// rules across them.
//
// Contract: train_command_line(options) is the table, bound to `options`, whose values at
// the call are the defaults it shows; --help and docs/cli.md (--help-markdown) are
// generated from it. parse_train_options(args) reads args through the table, resolves the
// defaults that depend on other flags (resolve_defaults) and checks the rules across flags
// (validate); it returns the options, with `help` set for --help or -h, or throws
// tandem::UsageError naming the offending flag and why (tandem-train exits with code 2).
// resolve_defaults, each where the flag was not given: --data ring8 for ring8-mlp,
// fashion-mnist otherwise; --batch 128 for dcgan64 (without --global-batch); --loss wgan-gp takes --n-critic
// 5 and
// --lr 1e-4 (the WGAN-GP paper's); --lr-schedule parsed, once, into `lr_schedule`; and
// --augment's groups parsed, once, into `augment` (what the trainer and the settings read); each a
// usage error naming its flag when it does not parse. validate refuses: a --model and --data that do not go
// together; a flag that needs another (--resume-allow-fresh without --resume, --gp-lambda without --loss
// wgan-gp, --r1-every without --r1-gamma, --lazy-r1-correction without lazy R1, --clip-grad-type without
// --clip-grad, --data images without --data-dir, --skip-bad-images without --data images,
// --channels 3 without --data images, --dynamic without --model mlp, --width without
// --model dcgan64, --low-precision-res without --precision bf16 or fp16 (or a K for a model
// other than dcgan and dcgan64), --loss-scale-init without --precision fp16, --prepare without --wrap whole,
// --trace-steps without --trace, an empty
// --trace or --tensorboard, --ema-rampup without --ema-kimg); --ema-kimg with --ema-decay;
// --global-batch with --batch (either one: per rank, or over the
// ranks);
// --tensorboard in a build without Protobuf (TANDEM_HAVE_TENSORBOARD); --overwrite with
// --resume; --cuda-graphs without --device cuda or with a flag of cuda_graphs_conflicts();
// --accumulate > 1 with a flag of accumulate_conflicts(), or a --ckpt-every that is not a
// multiple of --accumulate (a checkpoint inside an accumulation could not resume). Those two
// tables are the refusals' one list: the refusing flag's --help lists them from it. --r1-gamma and --r2-gamma
// go with every --loss (regularisers of D, wgan-gp's critic too), --r2-gamma with any --r1-every (R2 is never
// lazy). given(flag) (FlagGiven) says whether the command line set the flag. to_string(value) is a choice's
// name as the flag spells it (what settings, checkpoints and messages print). adam_betas(loss, model) are the
// run's Adam betas.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "models/data/image_decode.h"
#include "models/diff_augment.h"
#include "models/gan_loss.h"
#include "models/wrap_mode.h"
#include "runtime/command_line.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

namespace tandem::models {

enum class TrainBackend { automatic, mpi, nccl };   // --backend auto: nccl for --device cuda, else mpi
enum class OnNonFinite { off, skip, stop, scrub };  // NaN/Inf in averaged gradients
enum class ClipGradType { l2, inf };                // the norm --clip-grad bounds

struct TrainOptions {
  std::string model = "ring8-mlp";
  std::string data;  // default: ring8 for ring8-mlp, fashion-mnist otherwise; or images
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // --data images: must be given
  int64_t channels = 1;                                        // image models: 1 (gray) or 3 (RGB)
  bool skip_bad_images = false;                                // --data images: leave out unreadable files
  int64_t max_image_side = data::kMaxImageSide;  // --data images: larger declared sides are refused
  int64_t iters = 2000;
  int64_t batch = 64;        // per rank (dcgan64: 128 unless given); with --global-batch B / world size
  int64_t global_batch = 0;  // --global-batch B: the batch over all ranks; 0: off (--batch per rank)
  int64_t width = 0;         // dcgan64: ngf = ndf; 0: the model's 64
  double lr = 2e-4;
  std::string lr_schedule_spec = "constant";  // --lr-schedule as given; resolve_defaults parses it
  optim::LrSchedule lr_schedule;              // parsed once, from lr_schedule_spec
  double clip_grad = 0.0;                     // max norm of each part's averaged gradients; 0: off
  ClipGradType clip_grad_type = ClipGradType::l2;
  int64_t accumulate = 1;           // train_steps per optimizer step (OptimWrapper accumulative_counts)
  double data_fraction = 1;         // image data: train on the first fraction of the images
  std::string augment_groups;       // --augment as given; resolve_defaults parses it into `augment`
  AugmentPolicy augment;            // DiffAugment's groups, parsed once; none (!any()): off
  double augment_target = 0;        // ADA's target for E[sign(D(real))]; 0: p = 1 throughout
  double augment_kimg = 100;        // ADA's speed: p may go from 0 to 1 in this many thousand reals
  double ema_decay = 0.999;         // samples come from an exponential moving average of G's weights; 0: off
  double ema_kimg = 0;              // > 0: the average by a half-life in thousands of images instead
  double ema_rampup = 0;            // with ema_kimg: half-life at most this times the images seen; 0: off
  WrapMode wrap = WrapMode::whole;  // --wrap offers whole | separate
  bool explicit_prepare = false;    // MMGeneration style: prepare_for_backward before each backward
  double bucket_cap_mb = 25.0;
  TrainBackend backend = TrainBackend::automatic;
  DeviceKind device = DeviceKind::cpu;
  uint64_t seed = 0;
  std::string out = "runs/default";
  int64_t ckpt_every = 0;  // 0: only at the end
  bool resume = false;
  bool resume_allow_fresh = false;   // --resume starts from 0 when no checkpoint is there or usable
  bool resume_skip_damaged = false;  // --resume passes over damaged newer checkpoints (else stops)
  bool overwrite = false;            // without --resume: replace an earlier run's checkpoints in --out
  int64_t sample_every = 0;          // 0: only at the end
  int64_t log_every = 100;
  bool dynamic = false;
  GanLoss loss = GanLoss::non_saturating;
  double gp_lambda = 10.0;        // wgan-gp: the gradient penalty's weight
  int64_t n_critic = 1;           // D steps per G step (wgan-gp: 5 unless given)
  double r1_gamma = 0.0;          // R1 penalty on reals; 0: off
  int64_t r1_every = 1;           // lazy R1: a penalty-only D step every N D steps
  double r2_gamma = 0.0;          // R2 penalty on fakes, in every D loss; 0: off
  double pl_weight = 0.0;         // path-length regularisation of G (stylegan2: 2); 0: off
  int64_t pl_every = 4;           // lazy path length: a G update of the penalty alone every N G steps
  double pl_decay = 0.01;         // the running mean path length's rate
  int64_t pl_batch_shrink = 2;    // path length on every k-th row of the batch
  double style_mixing = 0.0;      // stylegan2's style mixing probability (stylegan2: 0.9)
  int64_t pggan_stage_iters = 0;  // 0: iters / 3
  OnNonFinite on_nonfinite = OnNonFinite::off;
  int64_t max_nonfinite_steps = 100;     // with skip/scrub: stop after this many in a row (0: never)
  bool lazy_r1_correction = true;        // lazy R1: D's Adam takes lr * c, betas^c, c = N / (N + 1)
  bool sync_bn = false;                  // batch norms use statistics over every rank's batch
  int64_t check_replicas_every = 0;      // compare parameter (and broadcast buffer) hashes every N steps
  bool detect_anomalous_params = false;  // warn of parameters a part's loss does not reach
  bool cuda_graphs = false;              // capture the step into a CUDA graph and replay it
  DType precision = DType::f32;          // the compute dtype of GEMMs and convolutions (precision.h)
  std::string low_precision_res_spec = "all";  // --low-precision-res as given; resolve_defaults parses it
  int64_t low_precision_res = -1;              // the resolutions in --precision; -1: every layer
  double loss_scale_init = 65536.0;            // fp16: each part's loss scale at the start
  bool scale_penalties = false;                // fp16: D's penalties' inner gradient under the loss scale
  std::string trace;          // a Chrome trace of the last steps goes here (rank 0 writes it); empty: off
  int64_t trace_steps = 200;  // steps the trace keeps (the summaries cover all); 0: every step
  std::string tensorboard;    // rank 0 writes TensorBoard event files into this folder; empty: off
  int64_t fid_every = 0;      // FID of generated samples every N iterations (fid_monitor.h); 0: off
  int64_t fid_samples = 10000;
  std::string fid_cache;  // the feature network's and real statistics' cache; empty: the default
  std::string fid_network = "shipped";  // shipped | train (metrics/fid_evaluator.h)
  bool help = false;
};

const char* to_string(TrainBackend backend);  // "auto", "mpi", "nccl"
const char* to_string(DeviceKind device);     // "cpu", "cuda"
const char* to_string(GanLoss loss);          // "ns", "hinge", "wgan-gp", "rpgan"
const char* to_string(OnNonFinite policy);    // "off", "skip", "stop", "scrub"
const char* to_string(ClipGradType type);     // "2", "inf"
const char* precision_name(DType precision);  // "fp32", "bf16", "fp16"
// --precision in words for the run's first line: the dtype, the layers it covers and the
// kernels it runs on there (kernels/reduced_precision.h); "" for fp32.
std::string precision_summary(const TrainOptions& o);

CommandLine train_command_line(TrainOptions& options);
TrainOptions parse_train_options(const std::vector<std::string>& args);

using FlagGiven = std::function<bool(const std::string& flag)>;
void resolve_defaults(TrainOptions& options, const FlagGiven& given);
void validate(const TrainOptions& options, const FlagGiven& given);

// A flag that another flag refuses, as validate() and the refusing flag's --help read it.
struct FlagConflict {
  const char* listed_as;  // as the help lists it: "--n-critic > 1", "lazy R1"
  const char* example;    // flags that bring it, and no other conflict of its table (the tests')
  bool (*applies)(const TrainOptions& options);
  // The refusal's words after "<flag> does not go with ": "--clip-grad (its norm is read ...)".
  std::string (*reason)(const TrainOptions& options, const FlagGiven& given);
};
// What --cuda-graphs refuses: work a replayed step cannot repeat (host reads, steps that come
// and go). In the order checked; the first that applies is named.
const std::vector<FlagConflict>& cuda_graphs_conflicts();
// What --accumulate > 1 refuses: anything that steps inside an accumulation.
const std::vector<FlagConflict>& accumulate_conflicts();

// The options of a run at `world_size` ranks: with --global-batch B, --batch is B / world_size,
// an Error naming B and the world size when it does not divide; without it global_batch is
// batch * world_size (either way the run's global batch, which its checkpoints record).
TrainOptions for_world_size(const TrainOptions& options, int world_size);

// Adam's betas for the run's loss and model: (0, 0.99) for the r3gan model (R3GAN's), else
// (0, 0.9) for wgan-gp, (0.5, 0.999) otherwise.
std::array<double, 2> adam_betas(GanLoss loss, const std::string& model = "");

// pggan's iterations per stage: --pggan-stage-iters, or iters / 3 (at least 1) when 0.
int64_t pggan_stage_iters(const TrainOptions& options);

}  // namespace tandem::models
