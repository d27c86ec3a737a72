// The settings of a tandem-train run: what its ranks must share, and what a resume keeps.
//
// Contract:
// - run_settings(options, backend, data_identity) lists every flag of tandem-train but
//   --out, --data-dir and --help, in a fixed order, each with its value as canonical text:
//   numbers in %g notation with the fewest digits that read back to the same value ("2e-4"
//   and "0.0002" both give "0.0002"; whole numbers below 10^15 as integers: "10", not
//   "1e+01"), switches "on" or "off" (--trace, --tensorboard and --fid-cache: whether given), --backend
//   as the backend the run resolved ("auto" becomes "mpi" or "nccl"), --data followed by
//   `data_identity` in parentheses
//   when it is not empty (an image dataset's size and content hash: data::dataset_identity),
//   --pggan-stage-iters for --model pggan as the stage length the run uses (0 resolved to
//   iters / 3).
// - Every rank of a run must have the same list (settings_agreement.h): --out and
//   --data-dir are paths that may differ per node; the data they lead to may not.
// - kept_on_resume marks the settings that shape the run's trajectory (its data, noise and
//   updates): --data, --batch, --global-batch (the run's: for_world_size), --lr,
//   --lr-schedule (canonical), --clip-grad, --clip-grad-type, --accumulate, --seed,
//   --dynamic, --loss, --gp-lambda, --n-critic, --r1-gamma, --r1-every, --r2-gamma, --pl-weight
//   (--pl-every, --pl-decay and --pl-batch-shrink with it), --augment (canonical
//   groups, "off"), --augment-target, --augment-kimg, --data-fraction,
//   --pggan-stage-iters for pggan, and --lazy-r1-correction with lazy R1 (r1-gamma > 0,
//   r1-every > 1) or lazy path length (pl-weight > 0, pl-every > 1). A checkpoint records them
//   and a resume must match them (checkpointer.h). value_when_absent(setting) is the value a
//   checkpoint written before the setting was recorded ran with ("off" for
//   --lazy-r1-correction, "0" for --r2-gamma and --pl-weight), "" when such a checkpoint is not compared. The
//   others are honoured on resume: a larger --iters extends the run, and --wrap, --prepare,
//   --bucket-cap-mb, --backend, --device, --ema-decay, --ema-kimg, --ema-rampup, --ckpt-every,
//   --sample-every,
//   --log-every, --on-nonfinite, --max-nonfinite-steps, --cuda-graphs, --check-replicas-every,
//   --detect-anomalous-params, --fid-every and --fid-samples
//   take effect from the resumed
//   iteration. --model is kept by its own rule (the checkpoint's model type).
// - as_written() is the setting as a command line spells it: "--lr 0.0002", "--dynamic",
//   "no --dynamic"; metadata_key() is its key in checkpoint metadata: the flag without its
//   dashes, '-' as '_' ("lr", "pggan_stage_iters").
#pragma once

#include <string>
#include <vector>

#include "models/train/train_options.h"

namespace tandem::models {

struct RunSetting {
  std::string flag;   // "--lr"
  std::string value;  // canonical text: "0.0002"; "on" or "off" for a switch
  bool is_switch = false;
  bool kept_on_resume = false;

  std::string as_written() const;
  std::string metadata_key() const;
};

std::vector<RunSetting> run_settings(const TrainOptions& options, const std::string& backend,
                                     const std::string& data_identity);

std::string value_when_absent(const RunSetting& setting);

// `value` in %g notation with the fewest digits (1 to 17) that parse back to it exactly;
// a whole number below 10^15 in magnitude as an integer.
std::string canonical_number(double value);

}  // namespace tandem::models
