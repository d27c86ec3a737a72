#include "models/train/train_options.h"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <utility>

#include "autograd/lr_scheduler.h"
#include "kernels/reduced_precision.h"
#include "models/gan.h"
#include "models/stylegan2.h"
#include "models/train/fid_monitor.h"
#include "models/train/run_settings.h"
#include "runtime/error.h"

namespace tandem::models {

namespace {

constexpr const char* kSummary =
    "Launch with mpirun or srun: mpirun -np N tandem-train [flags] (torchrun is not a launcher for\n"
    "tandem: refused, naming both). Trains a GAN data-parallel: each rank draws its rows of the\n"
    "global batch's data and noise, every backward is synchronised over the parameters it\n"
    "reaches. Start every rank with the same flags: only --out and --data-dir may differ\n"
    "(node-local paths), and the data there must be the same. tandem-train --help-markdown\n"
    "prints this list as Markdown (docs/cli.md).";

// Each choice with the name its flag spells it by; to_string() and the table read these.
// Constant-initialised: to_string() may run before main (a test's static settings).
template <typename T>
using Named = std::pair<const char*, T>;

constexpr Named<TrainBackend> kBackends[] = {
    {"auto", TrainBackend::automatic}, {"mpi", TrainBackend::mpi}, {"nccl", TrainBackend::nccl}};
constexpr Named<DeviceKind> kDevices[] = {{"cpu", DeviceKind::cpu}, {"cuda", DeviceKind::cuda}};
constexpr Named<GanLoss> kLosses[] = {{"ns", GanLoss::non_saturating},
                                      {"hinge", GanLoss::hinge},
                                      {"wgan-gp", GanLoss::wgan_gp},
                                      {"rpgan", GanLoss::relativistic}};
constexpr Named<OnNonFinite> kNonFinite[] = {{"off", OnNonFinite::off},
                                             {"skip", OnNonFinite::skip},
                                             {"stop", OnNonFinite::stop},
                                             {"scrub", OnNonFinite::scrub}};
constexpr Named<ClipGradType> kClipGradTypes[] = {{"2", ClipGradType::l2}, {"inf", ClipGradType::inf}};
constexpr Named<DType> kPrecisions[] = {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}};
constexpr Named<bool> kPenaltyScalings[] = {{"unscaled", false}, {"scaled", true}};
constexpr Named<bool> kOnOff[] = {{"on", true}, {"off", false}};
constexpr Named<int64_t> kChannels[] = {{"1", 1}, {"3", 3}};
// --model r3gan's --r1-gamma and --r2-gamma unless given.
constexpr double kR3ganGamma = 0.1;
// stylegan2's objective unless given: lazy R1 (StyleGAN2's R1 interval 16) and path length.
constexpr double kStyleGan2R1Gamma = 0.05;
constexpr int64_t kStyleGan2R1Every = 16;
constexpr double kStyleGan2PathLengthWeight = 2.0;  // StyleGAN2's pl_weight

template <typename T, size_t N>
const char* name_in(const Named<T> (&names)[N], T value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "unknown";  // only for a value cast from outside the enumerators
}

// The choices as CommandLine::add_choice takes them.
template <typename T, size_t N>
std::vector<std::pair<std::string, T>> choices(const Named<T> (&names)[N]) {
  return {std::begin(names), std::end(names)};
}

[[noreturn]] void refuse(const std::string& message) { throw UsageError(message); }

std::string listed(const std::vector<FlagConflict>& conflicts) {
  std::string words;
  for (const FlagConflict& c : conflicts) words += (words.empty() ? "" : ", ") + std::string(c.listed_as);
  return words;
}

// `flag_text` ("--cuda-graphs", "--accumulate 4") is refused with the first conflict that applies.
void refuse_conflicts(const std::string& flag_text, const std::vector<FlagConflict>& conflicts,
                      const TrainOptions& o, const FlagGiven& given) {
  for (const FlagConflict& c : conflicts) {
    if (c.applies(o)) refuse(flag_text + " does not go with " + c.reason(o, given));
  }
}

}  // namespace

const std::vector<FlagConflict>& cuda_graphs_conflicts() {
  using O = const TrainOptions&;
  using G = const FlagGiven&;
  static const std::vector<FlagConflict> conflicts = {
      {"--clip-grad", "--clip-grad 1", [](O o) { return o.clip_grad > 0; },
       [](O, G) { return std::string("--clip-grad (its norm is read on the host at every step)"); }},
      {"--accumulate", "--accumulate 2", [](O o) { return o.accumulate > 1; },
       [](O, G) { return std::string("--accumulate (the step differs within an accumulation)"); }},
      {"--on-nonfinite", "--on-nonfinite skip", [](O o) { return o.on_nonfinite != OnNonFinite::off; },
       [](O o, G) {
         return "--on-nonfinite " + std::string(to_string(o.on_nonfinite)) +
                " (its check is read on the host at every step)";
       }},
      {"--n-critic > 1", "--loss wgan-gp", [](O o) { return o.n_critic > 1; },
       [](O o, G) {
         return "--n-critic " + std::to_string(o.n_critic) +
                (o.loss == GanLoss::wgan_gp ? " (wgan-gp's default; pass --n-critic 1)" : "") +
                " (G steps only at some iterations, so the step changes from one to the next)";
       }},
      {"lazy R1", "--r1-gamma 1 --r1-every 4", [](O o) { return o.r1_gamma > 0 && o.r1_every > 1; },
       [](O o, G) {
         return "lazy R1 (--r1-every " + std::to_string(o.r1_every) + ": a step of its own every " +
                std::to_string(o.r1_every) + " iterations)";
       }},
      {"--pl-weight", "--model stylegan2 --r1-every 1", [](O o) { return o.pl_weight > 0; },
       [](O, G) {
         return std::string("--pl-weight (a path-length step of its own every --pl-every G steps)");
       }},
      {"--check-replicas-every", "--check-replicas-every 5", [](O o) { return o.check_replicas_every > 0; },
       [](O, G) { return std::string("--check-replicas-every (its hashes are compared on the host)"); }},
      {"--augment", "--model dcgan --augment color", [](O o) { return o.augment.any(); },
       [](O, G) { return std::string("--augment (its parameters are drawn every step)"); }},
      {"--sync-bn", "--model dcgan --sync-bn", [](O o) { return o.sync_bn; },
       [](O, G) { return std::string("--sync-bn (its statistics are gathered through the host)"); }},
      {"--precision fp16", "--precision fp16", [](O o) { return o.precision == DType::f16; },
       [](O, G) {
         return std::string(
             "--precision fp16 (its loss scale lives on the host and its overflow check is read there at "
             "every step; bf16 needs no loss scale)");
       }},
  };
  return conflicts;
}

const std::vector<FlagConflict>& accumulate_conflicts() {
  using O = const TrainOptions&;
  using G = const FlagGiven&;
  static const std::vector<FlagConflict> conflicts = {
      {"--n-critic > 1", "--n-critic 2", [](O o) { return o.n_critic > 1; },
       [](O o, G given) {
         return "--n-critic " + std::to_string(o.n_critic) +
                (given("--n-critic") ? "" : " (wgan-gp's default)");
       }},
      {"lazy R1", "--r1-gamma 1 --r1-every 4", [](O o) { return o.r1_every > 1; },
       [](O, G) { return std::string("lazy R1 (--r1-every > 1)"); }},
      {"--pl-weight", "--model stylegan2 --r1-every 1", [](O o) { return o.pl_weight > 0; },
       [](O, G given) {
         return "path length (--pl-weight" +
                std::string(given("--pl-weight") ? "" : ", stylegan2's default; pass --pl-weight 0") + ")";
       }},
  };
  return conflicts;
}

namespace {

// --cuda-graphs needs the GPU, and none of the work a replayed graph cannot repeat.
void check_cuda_graphs(const TrainOptions& o, const FlagGiven& given) {
  if (o.device != DeviceKind::cuda)
    refuse("--cuda-graphs needs --device cuda (a CUDA graph captures GPU work), got --device " +
           std::string(to_string(o.device)));
  refuse_conflicts("--cuda-graphs", cuda_graphs_conflicts(), o, given);
}

// An accumulation is one optimizer step over several iterations: nothing may step inside it.
void check_accumulation(const TrainOptions& o, const FlagGiven& given) {
  if (o.accumulate == 1) return;
  const std::string k = std::to_string(o.accumulate);
  refuse_conflicts("--accumulate " + k, accumulate_conflicts(), o, given);
  if (o.ckpt_every % o.accumulate != 0)
    refuse("--ckpt-every " + std::to_string(o.ckpt_every) + " is not a multiple of --accumulate " + k +
           ": a checkpoint inside an accumulation could not be resumed");
}

}  // namespace

const char* to_string(TrainBackend backend) { return name_in(kBackends, backend); }
const char* to_string(DeviceKind device) { return name_in(kDevices, device); }
const char* to_string(GanLoss loss) { return name_in(kLosses, loss); }
const char* to_string(OnNonFinite policy) { return name_in(kNonFinite, policy); }
const char* to_string(ClipGradType type) { return name_in(kClipGradTypes, type); }
const char* precision_name(DType precision) { return name_in(kPrecisions, precision); }

std::string precision_summary(const TrainOptions& o) {
  if (o.precision == DType::f32) return "";
  std::ostringstream out;
  out << precision_name(o.precision) << " in ";
  if (o.low_precision_res < 0) {
    out << "every layer";
  } else {
    out << "the " << o.low_precision_res << " highest resolution(s)";
  }
  out << " on " << kernels::reduced_precision_kernels(o.precision, o.device == DeviceKind::cuda);
  return out.str();
}

CommandLine train_command_line(TrainOptions& o) {
  CommandLine cl("tandem-train", kSummary);
  cl.group("Model and data");
  cl.add_choice(
      "--model", &o.model, gan_model_names(),
      "the GAN to train (r3gan: R3GAN's small baseline, residual blocks with grouped convolutions, "
      "trained with --loss rpgan, R1 and R2 and Adam betas (0, 0.99) unless given; stylegan2: a small "
      "StyleGAN2 at 28x28, lazy R1 by default)");
  cl.add_choice("--data", &o.data, {"ring8", "fashion-mnist", "images"}, "the training data");
  cl.describe_default("--data", "ring8 for ring8-mlp, else fashion-mnist");
  cl.add("--data-dir", &o.data_dir,
         "Fashion-MNIST's IDX files; with --data images (required): a folder tree of PNG and JPEG files, "
         "every file in it (not hidden) loaded once at start, centre-cropped and averaged down to 28x28 "
         "(dcgan64: 64x64; it also enlarges Fashion-MNIST to 64x64 by the same rule)",
         "DIR");
  cl.add_choice("--channels", &o.channels, choices(kChannels),
                "image models: 1 (gray) or 3 (RGB, needs --data images); the images are converted to it");
  cl.add_flag("--skip-bad-images", &o.skip_bad_images,
              "--data images: leave out (and count) files that are not readable PNG or JPEG instead of "
              "stopping");
  cl.add_positive("--data-fraction", &o.data_fraction,
                  "image data: train on the first fraction of the images (0.1: 10%; the same subset at any "
                  "number of ranks), for data-efficiency experiments");
  cl.add(
      "--max-image-side", &o.max_image_side,
      "--data images: a file declaring a wider or higher picture is refused (or skipped) before its pixels "
      "are allocated",
      1);
  cl.add("--width", &o.width,
         "dcgan64: ngf = ndf, the channels of G's last and D's first layer (the others 2, 4, 8 times that)",
         1);
  cl.describe_default("--width", "64");
  cl.add_flag("--dynamic", &o.dynamic, "mlp: an extra D layer on alternate blocks of 5 iterations");
  cl.add("--pggan-stage-iters", &o.pggan_stage_iters, "pggan: iterations per stage (0: iters / 3)", 0);
  cl.add("--seed", &o.seed, "seed of weights, data and noise");

  cl.group("Optimisation");
  cl.add("--iters", &o.iters, "training iterations: one D update each, and a G update every --n-critic-th",
         1);
  cl.add("--batch", &o.batch, "batch per rank", 1);
  cl.describe_default("--batch", "64; dcgan64 128");
  cl.add("--global-batch", &o.global_batch,
         "batch over all ranks: each rank takes N / (number of ranks), which must divide it. Not with "
         "--batch. A checkpoint of such a run resumes at another number of ranks (mpirun -np M) with the "
         "same --global-batch: the same global batches, data and noise, from its iteration on",
         1);
  cl.describe_default("--global-batch", "off: --batch per rank");
  cl.add_positive("--lr", &o.lr,
                  "Adam learning rate; betas (0.5, 0.999), with wgan-gp (0, 0.9), r3gan (0, 0.99)");
  cl.describe_default("--lr", "2e-4; wgan-gp 1e-4");
  cl.add_choice(
      "--precision", &o.precision, choices(kPrecisions),
      "the dtype GEMMs and convolutions read their operands in, float32 accumulation and results; "
      "parameters, gradients, the Reducer and Adam stay fp32. fp16 adds a dynamic loss scale to each "
      "part's optimizer (steps with an overflow are skipped on every rank, logged as skipped_g and "
      "skipped_d)");
  cl.add("--low-precision-res", &o.low_precision_res_spec,
         "with --precision bf16 or fp16: all (every layer), or K: the layers of the K highest resolutions "
         "of G and D (StyleGAN's num_fp16_res; dcgan, dcgan64, r3gan and stylegan2, whose layers each have "
         "one resolution, stylegan2's mapping network excepted; the other models take all)",
         "all|K");
  cl.add_positive("--loss-scale-init", &o.loss_scale_init,
                  "with --precision fp16: each part's loss scale at the start; it halves at each step whose "
                  "gradients overflow and doubles after 2000 steps without (PyTorch GradScaler's rule)");
  cl.add_choice(
      "--penalty-scaling", &o.scale_penalties, choices(kPenaltyScalings),
      "with --precision fp16: the inner gradient of D's penalties (R1, R2, WGAN-GP) runs unscaled "
      "(the recipe MMagic's StyleGAN2 trained stably with), or scaled: under D's loss scale, then "
      "unscaled (PyTorch AMP's recipe; it keeps small inner gradients from flushing to zero, and its "
      "overflows are skipped steps). The loss scale multiplies the whole D loss either way");
  cl.add("--lr-schedule", &o.lr_schedule_spec,
         "learning rate by iteration, a factor of --lr: warmup:N[:F] (linear from F, default 0.001, to 1 "
         "over N iterations), cosine:T[:M] (cosine from 1 to M, default 0, over T iterations), step:S[:G] "
         "(times G, default 0.1, every S iterations), multistep:A,B,..[:G] (times G at each milestone), "
         "constant; a warm-up and one other joined by '+' multiply, both counted from iteration 0 "
         "(warmup:500+cosine:20000)",
         "SPEC");
  cl.add_off_or_positive("--clip-grad", &o.clip_grad,
                         "clip each part's averaged gradients to this norm before its optimizer steps; the "
                         "norm before clipping is logged as grad_norm_d and grad_norm_g (0: off)");
  cl.add_choice("--clip-grad-type", &o.clip_grad_type, choices(kClipGradTypes), "with --clip-grad: the norm");
  cl.add("--accumulate", &o.accumulate,
         "gradient accumulation: N iterations (micro-batches) per optimizer step, gradients averaged once "
         "per step; a last partial group steps at the end. Not with " +
             listed(accumulate_conflicts()) + "; --ckpt-every must be a multiple of N",
         1);
  cl.add_choice("--loss", &o.loss, choices(kLosses),
                "ns (non-saturating, softplus), hinge, wgan-gp (Wasserstein with gradient penalty; "
                "--n-critic 5, --lr 1e-4 unless given), or rpgan (relativistic pairing, R3GAN's: D's loss "
                "softplus(D(fake_i) - D(real_i)), G's softplus(D(real_i) - D(fake_i)), each fake paired with "
                "a real of its rank's batch; R3GAN adds --r1-gamma and --r2-gamma, both the same)");
  cl.describe_default("--loss", "ns; r3gan rpgan");
  cl.add_positive("--gp-lambda", &o.gp_lambda, "wgan-gp: the gradient penalty's weight");
  cl.add("--n-critic", &o.n_critic, "D steps per G step", 1);
  cl.describe_default("--n-critic", "1; wgan-gp 5");
  cl.add_off_or_positive("--r1-gamma", &o.r1_gamma,
                         "R1 penalty on reals, gamma/2 mean ||grad D(real)||^2 (0: off)");
  cl.describe_default("--r1-gamma", "0; r3gan 0.1; stylegan2 0.05");
  cl.add("--r1-every", &o.r1_every,
         "with --r1-gamma: lazy R1, a D update of the penalty alone, scaled by K, every K-th D step "
         "(1: in every D loss)",
         1);
  cl.describe_default("--r1-every", "1; stylegan2 16");
  cl.add_choice("--lazy-r1-correction", &o.lazy_r1_correction, choices(kOnOff),
                "with lazy R1: D's Adam takes lr * c and betas beta^c, c = K / (K + 1) for --r1-every K, "
                "as StyleGAN2 does for the extra updates (off: lr and betas as given, as before)");
  cl.add_off_or_positive(
      "--pl-weight", &o.pl_weight,
      "path-length regularisation of G (StyleGAN2's; a generator with a mapping network: "
      "stylegan2): weight * (|J^T y| - running mean)^2 for image-shaped noise y, a G update "
      "of the penalty alone every --pl-every G steps (0: off)");
  cl.describe_default("--pl-weight", "0; stylegan2 2");
  cl.add("--pl-every", &o.pl_every,
         "with --pl-weight: the path-length update every K-th G step, scaled by K (StyleGAN2: 4); with "
         "--lazy-r1-correction G's Adam takes lr * c, betas beta^c, c = K / (K + 1)",
         1);
  cl.add("--pl-decay", &o.pl_decay,
         "with --pl-weight: the running mean path length's rate, in (0, 1] (StyleGAN2: 0.01)", 0.0);
  cl.add("--pl-batch-shrink", &o.pl_batch_shrink,
         "with --pl-weight: the path-length step takes every K-th row of the batch (StyleGAN2's "
         "pl_batch_shrink; the same rows at any rank count); a rank's batch must be a multiple of K",
         1);
  cl.add("--style-mixing", &o.style_mixing,
         "stylegan2: the probability that a training sample takes its layers from a random cutoff on "
         "from a second latent (StyleGAN2's style_mixing_prob; decided per sample from its noise row, so "
         "the same samples mix at any rank count; pictures and FID never mix), in [0, 1] (0: off)");
  cl.describe_default("--style-mixing", "stylegan2 0.9");
  cl.add_off_or_positive("--r2-gamma", &o.r2_gamma,
                         "R2 penalty on fakes, gamma/2 mean ||grad D(fake)||^2 with respect to the detached "
                         "fakes, in every D loss whatever --r1-every (0: off). Any --loss");
  cl.describe_default("--r2-gamma", "0; r3gan 0.1");
  cl.add("--augment", &o.augment_groups,
         "DiffAugment: augment every image D sees, reals and fakes, in every D and G step and in the "
         "penalties, with the comma-separated groups color, translation, cutout (per-sample parameters "
         "drawn from the global batch's stream: N ranks train as one process). Image models only",
         "LIST");
  cl.describe_default("--augment", "off");
  cl.add_off_or_positive("--augment-target", &o.augment_target,
                         "with --augment: ADA's adaptive probability p, each group applied to a sample with "
                         "probability p, moved every 4 iterations by the sign of E[sign(D(real))] over all "
                         "ranks minus this target (0: p = 1 throughout)",
                         1.0);
  cl.add_positive("--augment-kimg", &o.augment_kimg,
                  "with --augment-target: p's speed, at most 0 to 1 in this many thousand real images "
                  "(StyleGAN2-ADA: 500; shorter runs here)");
  cl.add_off_or_positive("--ema-decay", &o.ema_decay, "samples from a moving average of G's weights (0: off)",
                         1.0);
  cl.add_off_or_positive("--ema-kimg", &o.ema_kimg,
                         "the moving average by a half-life of X thousand images over all ranks, StyleGAN's "
                         "ema_kimg: each iteration's decay is 0.5^(global batch / (X * 1000)). Not with "
                         "--ema-decay (0: --ema-decay's ramp instead)");
  cl.add_off_or_positive(
      "--ema-rampup", &o.ema_rampup,
      "with --ema-kimg: the half-life is at most X times the images seen so far (StyleGAN2-ADA "
      "uses 0.05), so the average follows the weights closely early on (0: off)");

  cl.group("Distributed");
  cl.add_choice("--backend", &o.backend, choices(kBackends), "auto: nccl with --device cuda, else mpi");
  cl.add_choice("--device", &o.device, choices(kDevices), "where tensors live");
  const std::vector<std::pair<std::string, WrapMode>> wrap_modes = {
      {wrap_mode_name(WrapMode::whole), WrapMode::whole},
      {wrap_mode_name(WrapMode::separate), WrapMode::separate}};
  cl.add_choice("--wrap", &o.wrap, wrap_modes, "one Reducer for the model, or one per part");
  cl.add_flag("--prepare", &o.explicit_prepare,
              "call prepare_for_backward before each backward (MMGeneration style)");
  cl.add_positive("--bucket-cap-mb", &o.bucket_cap_mb, "bucket size cap in MB");
  cl.add_flag("--sync-bn", &o.sync_bn,
              "batch norms (dcgan's G, dcgan64's) normalise with the statistics of every rank's batch "
              "(SyncBatchNorm), so that N ranks train as one process on the global batch; without it each "
              "rank's batch norms see its own batch only");
  cl.add_flag("--cuda-graphs", &o.cuda_graphs,
              "--device cuda: capture the whole step (forwards, backwards, bucket allreduces, optimizer "
              "steps) into a CUDA graph once it is stable (3 eager iterations) and replay it; recaptured "
              "when the model's structure or the batch's shape changes. Not with " +
                  listed(cuda_graphs_conflicts()));

  cl.group("Checkpoints and output");
  cl.add("--out", &o.out,
         "report.html (open it in a browser), metrics.jsonl, samples and checkpoints go here; one run at a "
         "time: a second is refused, naming the first. One that holds checkpoints is refused without "
         "--resume or --overwrite",
         "DIR");
  cl.add("--ckpt-every", &o.ckpt_every, "checkpoint every N iterations (0: at the end only)", 0);
  cl.add_flag("--resume", &o.resume,
              "continue from the newest checkpoint in --out, at the number of ranks that wrote it (with "
              "--global-batch: at any that divides it). It must have this run's " +
                  kept_on_resume_in_words() +
                  "; other flags may change (--iters extends). A damaged checkpoint (header or data) newer "
                  "than the newest readable one stops the run naming it; when every checkpoint is damaged, "
                  "or there is none, --resume stops naming --out");
  cl.add_flag(
      "--resume-allow-fresh", &o.resume_allow_fresh,
      "with --resume: start from iteration 0 when --out holds no checkpoint, or none that can be read");
  cl.add_flag(
      "--resume-skip-damaged", &o.resume_skip_damaged,
      "with --resume: pass over damaged checkpoints newer than the newest readable one, each named in "
      "a warning, and resume from that one");
  cl.add_flag("--overwrite", &o.overwrite,
              "start a new run in an --out that holds an earlier run's checkpoints: they and its sample "
              "pictures are removed first");
  cl.add("--sample-every", &o.sample_every, "write a sample picture every N iterations (0: at the end)", 0);
  cl.add("--log-every", &o.log_every, "progress line every N iterations", 1);
  cl.add(
      "--tensorboard", &o.tensorboard,
      "rank 0 writes TensorBoard event files into DIR (made if missing): the logged scalars every "
      "--log-every iterations and each sample picture; on --resume, the events after the checkpoint's "
      "iteration are cut from DIR's files first (as from metrics.jsonl), so none is repeated. Needs a build "
      "with Protobuf (libprotobuf-dev)",
      "DIR");
  cl.describe_default("--tensorboard", "off");
  cl.add(
      "--fid-every", &o.fid_every,
      "FID of --fid-samples generated images (from the EMA generator when --ema-decay is on) every N "
      "iterations and at the end, on the log point's line, metrics.jsonl and the report; a multiple of "
      "--log-every; fashion-mnist with mlp, dcgan, dcgan64 (resized to 28x28), r3gan or stylegan2 (0: off)",
      0);
  cl.add("--fid-samples", &o.fid_samples, "generated images per FID, split over the ranks", 2, 1000000);
  cl.add_choice("--fid-network", &o.fid_network, {"shipped", "train"},
                "FID's feature network: the one tandem ships (the same weights on every machine, so FIDs "
                "compare across machines), or the same recipe trained here on first use (minutes) and cached "
                "in --fid-cache");
  cl.add("--fid-cache", &o.fid_cache,
         "where the real statistics (and a --fid-network train network) are cached", "DIR");
  cl.describe_default("--fid-cache", "$TANDEM_FID_CACHE, else ~/.cache/tandem/fid");

  cl.group("Diagnostics");
  cl.add_choice("--on-nonfinite", &o.on_nonfinite, choices(kNonFinite),
                "NaN/Inf in an averaged gradient: off, skip (the step, on every rank), stop (with the "
                "parameter names) or scrub (NaN becomes 0, +-Inf +-1e5, alike on every rank, and the step "
                "goes on; the elements scrubbed so far are logged as scrubbed_g and scrubbed_d)");
  cl.add("--max-nonfinite-steps", &o.max_nonfinite_steps,
         "with --on-nonfinite skip or scrub: stop every rank after this many optimizer steps of a part in a "
         "row with a non-finite averaged gradient (steps, not iterations: --accumulate and --n-critic step "
         "less often), naming the parts (a warning at the first; 0: never stop)",
         0);
  cl.add("--check-replicas-every", &o.check_replicas_every,
         "every N steps compare a hash of every parameter across ranks, and of every buffer (batch-norm "
         "running statistics) right after broadcasting it from rank 0 (between broadcasts each rank's "
         "statistics follow its own data); stop naming the first that differs (0: never)",
         0);
  cl.add_flag("--detect-anomalous-params", &o.detect_anomalous_params,
              "after each backward, warn (one line per new set) of the parameters that require grad in a "
              "part the backward reaches but that its loss does not reach");
  cl.add("--trace", &o.trace,
         "write a timeline of the last --trace-steps steps of every rank to FILE (Chrome trace-event "
         "JSON: Perfetto, chrome://tracing) and print each phase's overlap and exposed communication "
         "over the whole run at the end",
         "FILE");
  cl.describe_default("--trace", "off");
  cl.add("--trace-steps", &o.trace_steps,
         "with --trace: the steps each rank keeps in memory and in FILE, the last ones (0: every step; "
         "memory then grows by tens of kilobytes per step)",
         0);

  // What a resume keeps and what may differ between ranks, in each flag's help, from
  // run_settings.cpp's table (the one list).
  for (const RunSetting& s : run_settings(TrainOptions{}, "", "")) {
    if (s.on_resume == OnResume::may_change) continue;
    cl.add_note(s.flag, "Kept on resume" + (s.resume_note.empty() ? "" : " (" + s.resume_note + ")"));
  }
  cl.add_note("--model", "Kept on resume (a checkpoint of another model is refused)");
  for (const char* path : {"--out", "--data-dir"})
    cl.add_note(path, "May differ between ranks (a node-local path); every other flag must be the same");
  return cl;
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  TrainOptions o;
  CommandLine cl = train_command_line(o);
  if (!cl.try_parse(args)) {
    o.help = true;
    return o;
  }
  const FlagGiven given = [&cl](const std::string& flag) { return cl.given(flag); };
  resolve_defaults(o, given);
  validate(o, given);
  return o;
}

void resolve_defaults(TrainOptions& o, const FlagGiven& given) {
  if (!given("--data")) o.data = o.model == "ring8-mlp" ? "ring8" : "fashion-mnist";
  if (o.model == "dcgan64" && !given("--batch") && !given("--global-batch")) o.batch = 128;
  if (o.model == "r3gan") {  // R3GAN's objective: the relativistic pairing loss with R1 and R2, gamma equal
    if (!given("--loss")) o.loss = GanLoss::relativistic;
    if (!given("--r1-gamma")) o.r1_gamma = kR3ganGamma;
    if (!given("--r2-gamma")) o.r2_gamma = kR3ganGamma;
  }
  if (o.model == "stylegan2" && !given("--r1-gamma")) o.r1_gamma = kStyleGan2R1Gamma;
  if (o.model == "stylegan2" && !given("--r1-every")) o.r1_every = kStyleGan2R1Every;
  if (o.model == "stylegan2" && !given("--pl-weight")) o.pl_weight = kStyleGan2PathLengthWeight;
  if (o.model == "stylegan2" && !given("--style-mixing")) o.style_mixing = StyleGan2Generator::kStyleMixing;
  if (o.loss == GanLoss::wgan_gp && !given("--n-critic")) o.n_critic = 5;
  if (o.loss == GanLoss::wgan_gp && !given("--lr")) o.lr = 1e-4;
  try {
    o.augment = parse_augment_policy(o.augment_groups);
  } catch (const Error& e) {
    refuse("--augment: " + e.message());
  }
  if (o.low_precision_res_spec == "all") {
    o.low_precision_res = -1;
  } else {
    char* end = nullptr;
    const long k = std::strtol(o.low_precision_res_spec.c_str(), &end, 10);
    if (o.low_precision_res_spec.empty() || *end != '\0' || k < 1)
      refuse("--low-precision-res " + o.low_precision_res_spec +
             ": say all, or a whole number of resolutions >= 1");
    o.low_precision_res = k;
  }
  try {
    o.lr_schedule = optim::parse_lr_schedule(o.lr_schedule_spec);
  } catch (const Error& e) {
    refuse("--lr-schedule: " + e.message());
  }
}

void validate(const TrainOptions& o, const FlagGiven& given) {
  if ((o.model == "ring8-mlp") != (o.data == "ring8")) {
    refuse("--model " + o.model + " cannot train on --data " + o.data +
           " (ring8-mlp goes with ring8, the image models with fashion-mnist or images)");
  }
  const bool images = o.data == "images";
  if (images && !given("--data-dir"))
    refuse("--data images needs --data-dir DIR (a folder of PNG/JPEG files)");
  if (o.skip_bad_images && !images) refuse("--skip-bad-images goes with --data images");
  if (o.channels == 3 && !images) refuse("--channels 3 goes with --data images (" + o.data + " is gray)");
  if (o.dynamic && o.model != "mlp") refuse("--dynamic applies to --model mlp only");
  if (o.width != 0 && o.model != "dcgan64") refuse("--width applies to --model dcgan64 only");
  if (o.explicit_prepare && o.wrap != WrapMode::whole) refuse("--prepare goes with --wrap whole");
  if (given("--global-batch") && given("--batch"))
    refuse(
        "--global-batch and --batch do not go together: --global-batch B gives each rank B / (number of "
        "ranks)");
  if (o.resume_allow_fresh && !o.resume) refuse("--resume-allow-fresh goes with --resume");
  if (o.resume_skip_damaged && !o.resume) refuse("--resume-skip-damaged goes with --resume");
  if (o.overwrite && o.resume) refuse("--overwrite and --resume do not go together");
  if (given("--gp-lambda") && o.loss != GanLoss::wgan_gp) refuse("--gp-lambda goes with --loss wgan-gp");
  if (given("--r1-every") && o.r1_gamma == 0) refuse("--r1-every goes with --r1-gamma (a positive value)");
  if (given("--lazy-r1-correction") && !(o.r1_gamma > 0 && o.r1_every > 1) &&
      !(o.pl_weight > 0 && o.pl_every > 1))
    refuse(
        "--lazy-r1-correction goes with lazy R1 (--r1-gamma and --r1-every > 1) or lazy path length "
        "(--pl-weight and --pl-every > 1)");
  if ((given("--pl-every") || given("--pl-decay") || given("--pl-batch-shrink")) && o.pl_weight == 0)
    refuse("--pl-every, --pl-decay and --pl-batch-shrink go with --pl-weight (a positive value)");
  if (o.pl_decay <= 0 || o.pl_decay > 1) refuse("--pl-decay is a rate in (0, 1]");
  if (given("--style-mixing") && o.model != "stylegan2")
    refuse("--style-mixing applies to --model stylegan2 only (a generator with a mapping network)");
  if (!(o.style_mixing >= 0 && o.style_mixing <= 1))
    refuse("--style-mixing is a probability in [0, 1], got " + std::to_string(o.style_mixing));
  if (o.pl_weight > 0 && o.model != "stylegan2")
    refuse(
        "--pl-weight: path-length regularisation needs a generator with a mapping network (stylegan2), "
        "not --model " +
        o.model);
  if (given("--ema-kimg") && given("--ema-decay"))
    refuse(
        "--ema-kimg and --ema-decay do not go together: --ema-kimg sets the moving average's decay by a "
        "half-life in images, --ema-decay by a maximum; pass one");
  if (given("--ema-rampup") && o.ema_kimg == 0)
    refuse("--ema-rampup goes with --ema-kimg (a positive value)");
  if (o.data_fraction > 1) refuse("--data-fraction is a fraction in (0, 1]");
  if (given("--data-fraction") && o.data == "ring8") refuse("--data-fraction goes with image data");
  if (o.augment.any() && o.model == "ring8-mlp") refuse("--augment goes with the image models");
  if (given("--augment-target") && !o.augment.any()) refuse("--augment-target goes with --augment");
  if (given("--augment-kimg") && o.augment_target == 0) refuse("--augment-kimg goes with --augment-target");
  if (given("--clip-grad-type") && o.clip_grad == 0)
    refuse("--clip-grad-type goes with --clip-grad (a positive max norm)");
  if (given("--trace") && o.trace.empty()) refuse("--trace needs a file name");
  if (given("--trace-steps") && o.trace.empty()) refuse("--trace-steps goes with --trace");
  if (o.precision == DType::f16 &&
      (o.on_nonfinite == OnNonFinite::stop || o.on_nonfinite == OnNonFinite::scrub))
    refuse("--precision fp16 does not go with --on-nonfinite " + std::string(to_string(o.on_nonfinite)) +
           ": its loss scale skips the steps whose gradients overflow and backs off (" +
           (o.on_nonfinite == OnNonFinite::stop ? "stop would end the run at the first"
                                                : "scrub would hide them") +
           "); --on-nonfinite skip agrees with it");
  if (given("--loss-scale-init") && o.precision != DType::f16)
    refuse("--loss-scale-init goes with --precision fp16 (bf16 has float32's range: no loss scale)");
  if (given("--penalty-scaling") && o.precision != DType::f16)
    refuse("--penalty-scaling goes with --precision fp16 (only fp16 has a loss scale)");
  if (given("--low-precision-res") && o.precision == DType::f32)
    refuse("--low-precision-res goes with --precision bf16 or fp16");
  if (o.low_precision_res > 0 && (o.model == "mlp" || o.model == "ring8-mlp" || o.model == "pggan"))
    refuse("--low-precision-res " + o.low_precision_res_spec + ": --model " + o.model +
           " has no layers of one resolution each (dcgan, dcgan64, r3gan and stylegan2 do); say all");
  if (given("--tensorboard") && o.tensorboard.empty()) refuse("--tensorboard needs a folder name");
#if !TANDEM_HAVE_TENSORBOARD
  if (given("--tensorboard"))
    refuse(
        "--tensorboard needs a tandem built with Protobuf (apt-get install libprotobuf-dev "
        "protobuf-compiler, then configure again)");
#endif
  if (given("--max-nonfinite-steps") && o.on_nonfinite != OnNonFinite::skip &&
      o.on_nonfinite != OnNonFinite::scrub)
    refuse(
        "--max-nonfinite-steps goes with --on-nonfinite skip or scrub (stop stops at the first; off does not "
        "look)");
  if (o.cuda_graphs) check_cuda_graphs(o, given);
  check_accumulation(o, given);
  check_fid_options(o, given);
}

std::array<double, 2> adam_betas(GanLoss loss, const std::string& model) {
  if (model == "r3gan") return {0.0, 0.99};
  return loss == GanLoss::wgan_gp ? std::array<double, 2>{0.0, 0.9} : std::array<double, 2>{0.5, 0.999};
}

TrainOptions for_world_size(const TrainOptions& options, int world_size) {
  TrainOptions o = options;
  if (o.global_batch > 0) {
    TANDEM_CHECK(o.global_batch % world_size == 0,
                 "--global-batch " << o.global_batch << " does not divide over " << world_size
                                   << " rank(s): pass a multiple of " << world_size
                                   << " or start a number of ranks (mpirun -np) that divides "
                                   << o.global_batch);
    o.batch = o.global_batch / world_size;
  }
  o.global_batch = o.batch * world_size;
  return o;
}

int64_t pggan_stage_iters(const TrainOptions& o) {
  return o.pggan_stage_iters > 0 ? o.pggan_stage_iters : std::max<int64_t>(1, o.iters / 3);
}

}  // namespace tandem::models
