// Command-line options of tandem-train.
//
// Contract: parse_train_options(args) returns the options or throws UsageError (exit
// code 2) naming the offending flag and why: an unknown flag, a missing or malformed
// value, a value out of range, a flag that needs another (--resume-allow-fresh without
// --resume, --gp-lambda without --loss wgan-gp, --r1-every without --r1-gamma,
// --clip-grad-type without --clip-grad, --data images without --data-dir,
// --skip-bad-images without --data images, --channels 3 without --data images), a
// --lr-schedule that does not parse (stored in its canonical form), --cuda-graphs
// without --device cuda or with a flag whose work a replayed step cannot repeat
// (--clip-grad, --accumulate > 1, --on-nonfinite skip/stop, --n-critic > 1 including
// wgan-gp's default, lazy R1, --check-replicas-every, --sync-bn), --accumulate with
// --n-critic or lazy R1, or a --ckpt-every that is not a multiple of --accumulate (a
// checkpoint inside an accumulation could not resume). Defaults
// that depend on the loss are resolved here: --loss wgan-gp without --n-critic or --lr
// takes 5 and 1e-4 (the WGAN-GP paper's); adam_betas(options) are its Adam betas. Flags take "--flag value"
// or "--flag=value"; --help sets `help`. usage() is the
// --help text.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/wrap_mode.h"

namespace tandem::models {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrainOptions {
  std::string model = "ring8-mlp";
  std::string data;  // default: ring8 for ring8-mlp, fashion-mnist otherwise; or images
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // --data images: must be given
  int64_t channels = 1;                                        // image models: 1 (gray) or 3 (RGB)
  bool skip_bad_images = false;                                // --data images: leave out unreadable files
  int64_t iters = 2000;
  int64_t batch = 64;  // per rank (dcgan64: 128 unless given)
  int64_t width = 0;   // dcgan64: ngf = ndf; 0: the model's 64
  double lr = 2e-4;
  std::string lr_schedule = "constant";  // canonical (optim::LrSchedule::str())
  double clip_grad = 0.0;                // max norm of each part's averaged gradients; 0: off
  std::string clip_grad_type = "2";      // 2 | inf
  int64_t accumulate = 1;                // train_steps per optimizer step (OptimWrapper accumulative_counts)
  double ema_decay = 0.999;         // samples come from an exponential moving average of G's weights; 0: off
  WrapMode wrap = WrapMode::whole;  // --wrap offers whole | separate
  bool explicit_prepare = false;    // MMGeneration style: prepare_for_backward before each backward
  double bucket_cap_mb = 25.0;
  std::string backend = "auto";  // auto | mpi | nccl
  std::string device = "cpu";    // cpu | cuda
  uint64_t seed = 0;
  std::string out = "runs/default";
  int64_t ckpt_every = 0;  // 0: only at the end
  bool resume = false;
  bool resume_allow_fresh = false;  // --resume starts from 0 when no checkpoint is there or usable
  bool overwrite = false;           // without --resume: replace an earlier run's checkpoints in --out
  int64_t sample_every = 0;         // 0: only at the end
  int64_t log_every = 100;
  bool dynamic = false;
  std::string loss = "ns";               // ns | hinge | wgan-gp
  double gp_lambda = 10.0;               // wgan-gp: the gradient penalty's weight
  int64_t n_critic = 1;                  // D steps per G step (wgan-gp: 5 unless given)
  double r1_gamma = 0.0;                 // R1 penalty on reals; 0: off
  int64_t r1_every = 1;                  // lazy R1: a penalty-only D step every N D steps
  int64_t pggan_stage_iters = 0;         // 0: iters / 3
  std::string on_nonfinite = "off";      // off | skip | stop: NaN/Inf in averaged gradients
  bool sync_bn = false;                  // batch norms use statistics over every rank's batch
  int64_t check_replicas_every = 0;      // compare parameter (and broadcast buffer) hashes every N steps
  bool detect_anomalous_params = false;  // warn of parameters a part's loss does not reach
  bool cuda_graphs = false;              // capture the step into a CUDA graph and replay it
  std::string trace;  // a Chrome trace of every step goes here (rank 0 writes it); empty: off
  bool help = false;
};

TrainOptions parse_train_options(const std::vector<std::string>& args);
std::string usage();

// Adam's betas for the run's loss: (0, 0.9) for wgan-gp, (0.5, 0.999) otherwise.
std::array<double, 2> adam_betas(const TrainOptions& options);

// pggan's iterations per stage: --pggan-stage-iters, or iters / 3 (at least 1) when 0.
int64_t pggan_stage_iters(const TrainOptions& options);

// --cuda-graphs' checks (parse_train_options runs them): UsageError naming the flag.
void check_cuda_graph_options(const TrainOptions& options);

}  // namespace tandem::models
