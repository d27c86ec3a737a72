#include "models/train/train_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "autograd/lr_scheduler.h"
#include "models/gan.h"
#include "runtime/error.h"

namespace tandem::models {

namespace {

[[noreturn]] void usage_error(const std::string& message) { throw UsageError(message + " (see --help)"); }

int64_t parse_int(const std::string& flag, const std::string& value, int64_t min) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (ec != std::errc() || end != value.data() + value.size()) {
    usage_error(flag + " needs an integer, got '" + value + "'");
  }
  if (out < min) usage_error(flag + " must be at least " + std::to_string(min) + ", got " + value);
  return out;
}

double parse_double(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    double out = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument("trailing characters");
    if (!(out > 0) || !std::isfinite(out))
      usage_error(flag + " must be a positive finite number, got " + value);
    return out;
  } catch (const std::logic_error&) {
    usage_error(flag + " needs a number, got '" + value + "'");
  }
}

// A number >= 0 (0 switches the feature off).
double parse_non_negative(const std::string& flag, const std::string& value) {
  if (value == "0") return 0.0;
  try {
    size_t used = 0;
    double out = std::stod(value, &used);
    if (used != value.size()) throw std::invalid_argument("trailing characters");
    if (!(out >= 0) || !std::isfinite(out))
      usage_error(flag + " must be a finite number >= 0 (0: off), got " + value);
    return out;
  } catch (const std::logic_error&) {
    usage_error(flag + " needs a number, got '" + value + "'");
  }
}

std::string one_of(const std::string& flag, const std::string& value,
                   const std::vector<std::string>& choices) {
  for (const auto& c : choices) {
    if (value == c) return value;
  }
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : "|") + c;
  usage_error(flag + " must be one of " + list + ", got '" + value + "'");
}

}  // namespace

std::string usage() {
  return R"(usage: mpirun -np N tandem-train [flags]

Trains a GAN data-parallel: each rank draws its own data and noise, every backward is
synchronised over the parameters it reaches. Start every rank with the same flags: only
--out and --data-dir may differ (node-local paths), and the data there must be the same.
Launch with mpirun or srun: torchrun is not a launcher for tandem (refused, naming both).

  --model NAME          ring8-mlp | mlp | dcgan | dcgan64 | pggan   (ring8-mlp)
  --data NAME           ring8 | fashion-mnist | images
                                            (ring8 for ring8-mlp, else fashion-mnist)
  --data-dir DIR        Fashion-MNIST IDX files        (/usr/share/datasets/fashion-mnist);
                        with --data images (required): a folder tree of PNG and JPEG
                        files, every file in it (not hidden) loaded once at start,
                        centre-cropped and averaged down to 28x28 (dcgan64: 64x64;
                        it also enlarges Fashion-MNIST to 64x64 by the same rule)
  --channels C          image models: 1 (gray) | 3 (RGB, needs --data images); the
                        images are converted to it                                (1)
  --skip-bad-images     --data images: leave out (and count) files that are not
                        readable PNG or JPEG instead of stopping
  --iters N             training iterations: one D update each, and a G update
                        every --n-critic-th                                   (2000)
  --batch N             batch per rank                          (64; dcgan64 128)
  --width W             dcgan64: ngf = ndf, the channels of G's last and D's first
                        layer (the others 2, 4, 8 times that)                   (64)
  --lr X                Adam learning rate; betas (0.5, 0.999), with wgan-gp (0, 0.9)
                                                              (2e-4; wgan-gp 1e-4)
  --lr-schedule SPEC    learning rate by iteration, a factor of --lr: warmup:N[:F]
                        (linear from F, default 0.001, to 1 over N iterations),
                        cosine:T[:M] (cosine from 1 to M, default 0, over T iterations),
                        step:S[:G] (times G, default 0.1, every S iterations),
                        multistep:A,B,..[:G] (times G at each milestone), constant; a
                        warm-up and one other joined by '+' multiply, both counted from
                        iteration 0 (warmup:500+cosine:20000)                 (constant)
  --clip-grad MAX       clip each part's averaged gradients to norm MAX before its
                        optimizer steps; the norm before clipping is logged as
                        grad_norm_d and grad_norm_g (0: off)                       (0)
  --clip-grad-type T    with --clip-grad: the norm, 2 or inf                        (2)
  --accumulate N        gradient accumulation: N iterations (micro-batches) per
                        optimizer step, gradients averaged once per step; a last
                        partial group steps at the end. Not with --n-critic > 1 or
                        lazy R1; --ckpt-every must be a multiple of N            (1)
  --ema-decay X         samples from a moving average of G's weights (0: off) (0.999)
  --wrap whole|separate one Reducer for the model, or one per part          (whole)
  --prepare             call prepare_for_backward before each backward (MMGeneration style)
  --bucket-cap-mb X     bucket size cap in MB                                   (25)
  --backend B           auto | mpi | nccl                                      (auto)
  --device D            cpu | cuda                                              (cpu)
  --seed N              seed of weights, data and noise                           (0)
  --out DIR             report.html (open it in a browser), metrics.jsonl, samples
                        and checkpoints go here (runs/default);
                        one run at a time: a second is refused, naming the first.
                        One that holds checkpoints is refused without --resume or
                        --overwrite
  --ckpt-every N        checkpoint every N iterations (0: at the end only)       (0)
  --resume              continue from the newest checkpoint in --out. It must have this
                        run's --data, --channels, --width, --batch, --lr, --lr-schedule,
                        --clip-grad, --clip-grad-type, --accumulate, --seed, --dynamic,
                        --loss, --gp-lambda, --n-critic, --r1-gamma, --r1-every (pggan:
                        and --pggan-stage-iters); other flags may change (--iters extends).
                        A file that cannot be read is skipped with a warning; when every
                        checkpoint is, or there is none, --resume stops naming --out
  --resume-allow-fresh  with --resume: start from iteration 0 when --out holds no
                        checkpoint, or none that can be read
  --overwrite           start a new run in an --out that holds an earlier run's
                        checkpoints: they and its sample pictures are removed first
  --sample-every N      write a sample picture every N iterations (0: at the end) (0)
  --log-every N         progress line every N iterations                       (100)
  --dynamic             mlp: an extra D layer on alternate blocks of 5 iterations
  --loss L              ns (non-saturating, softplus) | hinge | wgan-gp (Wasserstein
                        with gradient penalty; --n-critic 5, --lr 1e-4 unless given)
                                                                                 (ns)
  --gp-lambda X         wgan-gp: the gradient penalty's weight                   (10)
  --n-critic N          D steps per G step                           (1; wgan-gp 5)
  --r1-gamma G          R1 penalty on reals, G/2 mean ||grad D(real)||^2 (0: off) (0)
  --r1-every K          with --r1-gamma: lazy R1, a D update of the penalty alone,
                        scaled by K, every K-th D step (1: in every D loss)       (1)
  --pggan-stage-iters N pggan: iterations per stage (0: iters / 3)                (0)
  --on-nonfinite P      NaN/Inf in an averaged gradient: off | skip (the step, on
                        every rank) | stop (with the parameter names)            (off)
  --sync-bn             batch norms (dcgan's G, dcgan64's) normalise with the statistics of every
                        rank's batch (SyncBatchNorm), so that N ranks train as one
                        process on the global batch; without it each rank's batch
                        norms see its own batch only
  --check-replicas-every N  every N steps compare a hash of every parameter across
                        ranks, and of every buffer (batch-norm running statistics)
                        right after broadcasting it from rank 0 (between broadcasts
                        each rank's statistics follow its own data); stop naming the
                        first that differs (0: never)                            (0)
  --detect-anomalous-params  after each backward, warn (one line per new set) of the
                        parameters that require grad in a part the backward reaches
                        but that its loss does not reach
  --cuda-graphs         --device cuda: capture the whole step (forwards, backwards,
                        bucket allreduces, optimizer steps) into a CUDA graph once it
                        is stable (3 eager iterations) and replay it; recaptured when
                        the model's structure or the batch's shape changes. Not with
                        --clip-grad, --accumulate, --on-nonfinite, --n-critic > 1,
                        lazy R1, --check-replicas-every, --sync-bn
  --trace FILE          write a timeline of every step of every rank to FILE (Chrome
                        trace-event JSON: Perfetto, chrome://tracing) and print each
                        phase's overlap and exposed communication at the end (off)
  --help                this text
)";
}

TrainOptions parse_train_options(const std::vector<std::string>& args) {
  TrainOptions o;
  bool data_given = false, data_dir_given = false, lr_given = false, gp_lambda_given = false,
       n_critic_given = false, r1_every_given = false;
  bool clip_grad_type_given = false, batch_given = false;
  std::map<std::string, std::function<void(const std::string&)>> with_value = {
      {"--model", [&](const std::string& v) { o.model = one_of("--model", v, gan_model_names()); }},
      {"--data",
       [&](const std::string& v) {
         o.data = one_of("--data", v, {"ring8", "fashion-mnist", "images"});
         data_given = true;
       }},
      {"--data-dir",
       [&](const std::string& v) {
         o.data_dir = v;
         data_dir_given = true;
       }},
      {"--channels",
       [&](const std::string& v) {
         o.channels = std::stoi(one_of("--channels", v, {"1", "3"}));
       }},
      {"--iters", [&](const std::string& v) { o.iters = parse_int("--iters", v, 1); }},
      {"--batch",
       [&](const std::string& v) {
         o.batch = parse_int("--batch", v, 1);
         batch_given = true;
       }},
      {"--width", [&](const std::string& v) { o.width = parse_int("--width", v, 1); }},
      {"--lr",
       [&](const std::string& v) {
         o.lr = parse_double("--lr", v);
         lr_given = true;
       }},
      {"--lr-schedule",
       [&](const std::string& v) {
         try {
           o.lr_schedule = optim::parse_lr_schedule(v).str();
         } catch (const Error& e) {
           usage_error("--lr-schedule: " + e.message());
         }
       }},
      {"--clip-grad", [&](const std::string& v) { o.clip_grad = parse_non_negative("--clip-grad", v); }},
      {"--clip-grad-type",
       [&](const std::string& v) {
         o.clip_grad_type = one_of("--clip-grad-type", v, {"2", "inf"});
         clip_grad_type_given = true;
       }},
      {"--accumulate", [&](const std::string& v) { o.accumulate = parse_int("--accumulate", v, 1); }},
      {"--ema-decay",
       [&](const std::string& v) {
         o.ema_decay = v == "0" ? 0.0 : parse_double("--ema-decay", v);
         if (o.ema_decay >= 1.0) usage_error("--ema-decay must be below 1, got " + v);
       }},
      {"--wrap",
       [&](const std::string& v) {
         o.wrap = *parse_wrap_mode(
             one_of("--wrap", v, {wrap_mode_name(WrapMode::whole), wrap_mode_name(WrapMode::separate)}));
       }},
      {"--bucket-cap-mb",
       [&](const std::string& v) { o.bucket_cap_mb = parse_double("--bucket-cap-mb", v); }},
      {"--backend",
       [&](const std::string& v) {
         o.backend = one_of("--backend", v, {"auto", "mpi", "nccl"});
       }},
      {"--device",
       [&](const std::string& v) {
         o.device = one_of("--device", v, {"cpu", "cuda"});
       }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--out", [&](const std::string& v) { o.out = v; }},
      {"--ckpt-every", [&](const std::string& v) { o.ckpt_every = parse_int("--ckpt-every", v, 0); }},
      {"--sample-every", [&](const std::string& v) { o.sample_every = parse_int("--sample-every", v, 0); }},
      {"--log-every", [&](const std::string& v) { o.log_every = parse_int("--log-every", v, 1); }},
      {"--loss",
       [&](const std::string& v) {
         o.loss = one_of("--loss", v, {"ns", "hinge", "wgan-gp"});
       }},
      {"--gp-lambda",
       [&](const std::string& v) {
         o.gp_lambda = parse_double("--gp-lambda", v);
         gp_lambda_given = true;
       }},
      {"--n-critic",
       [&](const std::string& v) {
         o.n_critic = parse_int("--n-critic", v, 1);
         n_critic_given = true;
       }},
      {"--r1-gamma", [&](const std::string& v) { o.r1_gamma = parse_non_negative("--r1-gamma", v); }},
      {"--r1-every",
       [&](const std::string& v) {
         o.r1_every = parse_int("--r1-every", v, 1);
         r1_every_given = true;
       }},
      {"--pggan-stage-iters",
       [&](const std::string& v) { o.pggan_stage_iters = parse_int("--pggan-stage-iters", v, 0); }},
      {"--on-nonfinite",
       [&](const std::string& v) {
         o.on_nonfinite = one_of("--on-nonfinite", v, {"off", "skip", "stop"});
       }},
      {"--check-replicas-every",
       [&](const std::string& v) { o.check_replicas_every = parse_int("--check-replicas-every", v, 0); }},
      {"--trace",
       [&](const std::string& v) {
         if (v.empty()) usage_error("--trace needs a file name");
         o.trace = v;
       }},
  };
  std::map<std::string, std::function<void()>> switches = {
      {"--resume", [&] { o.resume = true; }},
      {"--resume-allow-fresh", [&] { o.resume_allow_fresh = true; }},
      {"--overwrite", [&] { o.overwrite = true; }},
      {"--dynamic", [&] { o.dynamic = true; }},
      {"--prepare", [&] { o.explicit_prepare = true; }},
      {"--sync-bn", [&] { o.sync_bn = true; }},
      {"--detect-anomalous-params", [&] { o.detect_anomalous_params = true; }},
      {"--skip-bad-images", [&] { o.skip_bad_images = true; }},
      {"--cuda-graphs", [&] { o.cuda_graphs = true; }},
      {"--help", [&] { o.help = true; }},
      {"-h", [&] { o.help = true; }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inline_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inline_value = true;
    }
    if (auto s = switches.find(flag); s != switches.end()) {
      if (inline_value) usage_error(flag + " takes no value");
      s->second();
      continue;
    }
    auto w = with_value.find(flag);
    if (w == with_value.end()) usage_error("unknown flag '" + args[i] + "'");
    if (!inline_value) {
      if (i + 1 >= args.size()) usage_error(flag + " needs a value");
      value = args[++i];
    }
    w->second(value);
  }
  if (!data_given) o.data = o.model == "ring8-mlp" ? "ring8" : "fashion-mnist";
  if ((o.model == "ring8-mlp") != (o.data == "ring8")) {
    usage_error("--model " + o.model + " cannot train on --data " + o.data +
                " (ring8-mlp goes with ring8, the image models with fashion-mnist or images)");
  }
  const bool images = o.data == "images";
  if (images && !data_dir_given)
    usage_error("--data images needs --data-dir DIR (a folder of PNG/JPEG files)");
  if (o.skip_bad_images && !images) usage_error("--skip-bad-images goes with --data images");
  if (o.channels == 3 && !images)
    usage_error("--channels 3 goes with --data images (" + o.data + " is gray)");
  if (o.dynamic && o.model != "mlp") usage_error("--dynamic applies to --model mlp only");
  if (o.width != 0 && o.model != "dcgan64") usage_error("--width applies to --model dcgan64 only");
  if (o.model == "dcgan64" && !batch_given) o.batch = 128;
  if (o.explicit_prepare && o.wrap != WrapMode::whole) usage_error("--prepare goes with --wrap whole");
  if (o.resume_allow_fresh && !o.resume) usage_error("--resume-allow-fresh goes with --resume");
  if (o.overwrite && o.resume) usage_error("--overwrite and --resume do not go together");
  const bool wgan_gp = o.loss == "wgan-gp";
  if (gp_lambda_given && !wgan_gp) usage_error("--gp-lambda goes with --loss wgan-gp");
  if (r1_every_given && o.r1_gamma == 0) usage_error("--r1-every goes with --r1-gamma (a positive value)");
  if (clip_grad_type_given && o.clip_grad == 0)
    usage_error("--clip-grad-type goes with --clip-grad (a positive max norm)");
  if (wgan_gp && !n_critic_given) o.n_critic = 5;
  if (wgan_gp && !lr_given) o.lr = 1e-4;
  if (o.cuda_graphs) check_cuda_graph_options(o);
  if (o.accumulate > 1) {
    const std::string k = std::to_string(o.accumulate);
    if (o.n_critic > 1)
      usage_error("--accumulate " + k + " does not go with --n-critic " + std::to_string(o.n_critic) +
                  (n_critic_given ? "" : " (wgan-gp's default)"));
    if (o.r1_every > 1) usage_error("--accumulate " + k + " does not go with lazy R1 (--r1-every > 1)");
    if (o.ckpt_every % o.accumulate != 0)
      usage_error("--ckpt-every " + std::to_string(o.ckpt_every) + " is not a multiple of --accumulate " + k +
                  ": a checkpoint inside an accumulation could not be resumed");
  }
  return o;
}

void check_cuda_graph_options(const TrainOptions& o) {
  auto refuse = [](const std::string& why) { usage_error("--cuda-graphs " + why); };
  if (o.device != "cuda")
    refuse("needs --device cuda (a CUDA graph captures GPU work), got --device " + o.device);
  if (o.clip_grad > 0) refuse("does not go with --clip-grad (its norm is read on the host at every step)");
  if (o.accumulate > 1) refuse("does not go with --accumulate (the step differs within an accumulation)");
  if (o.on_nonfinite != "off")
    refuse("does not go with --on-nonfinite " + o.on_nonfinite +
           " (its check is read on the host at every step)");
  if (o.n_critic > 1)
    refuse("does not go with --n-critic " + std::to_string(o.n_critic) +
           (o.loss == "wgan-gp" ? " (wgan-gp's default; pass --n-critic 1)" : "") +
           " (G steps only at some iterations, so the step changes from one to the next)");
  if (o.r1_gamma > 0 && o.r1_every > 1)
    refuse("does not go with lazy R1 (--r1-every " + std::to_string(o.r1_every) +
           ": a step of its own every " + std::to_string(o.r1_every) + " iterations)");
  if (o.check_replicas_every > 0)
    refuse("does not go with --check-replicas-every (its hashes are compared on the host)");
  if (o.sync_bn) refuse("does not go with --sync-bn (its statistics are gathered through the host)");
}

std::array<double, 2> adam_betas(const TrainOptions& o) {
  return o.loss == "wgan-gp" ? std::array<double, 2>{0.0, 0.9} : std::array<double, 2>{0.5, 0.999};
}

int64_t pggan_stage_iters(const TrainOptions& o) {
  return o.pggan_stage_iters > 0 ? o.pggan_stage_iters : std::max<int64_t>(1, o.iters / 3);
}

}  // namespace tandem::models
