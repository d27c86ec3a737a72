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
// - agreed_across_ranks marks the settings every rank of a run must share
//   (settings_agreement.h compares them): all of them. --out and --data-dir are no settings:
//   paths that may differ per node (the data they lead to may not).
// - What a resume must match is run_settings.cpp's table, and nowhere else: each row's
//   OnResume rule. kept: the setting shapes the run's trajectory (its data, noise and
//   updates), is recorded in each checkpoint (checkpointer.h) and a resume must match it;
//   kept_when: the same, in the runs its condition (resume_note, in words) names, and
//   honoured otherwise; may_change: honoured on resume, taking effect from the resumed
//   iteration (a larger --iters extends the run). kept_on_resume is the rule applied to this
//   run. --model is kept by its own rule (the checkpoint's model type). value_when_absent(setting)
//   is the value a checkpoint written before the setting was recorded ran with ("off" for
//   --lazy-r1-correction, "0" for --r2-gamma and --pl-weight), "" when such a checkpoint is
//   not compared.
// - kept_on_resume_in_words() is the table's kept settings as --resume's help lists them:
//   "--data, --channels, ..., --pl-every (with --pl-weight), ...", each with its condition
//   or note and its value_when_absent in parentheses.
// - as_written() is the setting as a command line spells it: "--lr 0.0002", "--dynamic",
//   "no --dynamic"; metadata_key() is its key in checkpoint metadata: the flag without its
//   dashes, '-' as '_' ("lr", "pggan_stage_iters").
#pragma once

#include <string>
#include <vector>

#include "models/train/train_options.h"

namespace tandem::models {

// How a resume treats a setting (see the contract above).
enum class OnResume { may_change, kept, kept_when };

struct RunSetting {
  std::string flag;   // "--lr"
  std::string value;  // canonical text: "0.0002"; "on" or "off" for a switch
  bool is_switch = false;
  bool kept_on_resume = false;  // this run's: recorded in its checkpoints, a resume must match it
  OnResume on_resume = OnResume::may_change;
  std::string resume_note = "";  // kept_when: the runs it is kept in; kept: how it is compared
  bool agreed_across_ranks = true;

  std::string as_written() const;
  std::string metadata_key() const;
};

std::vector<RunSetting> run_settings(const TrainOptions& options, const std::string& backend,
                                     const std::string& data_identity);

std::string value_when_absent(const RunSetting& setting);

std::string kept_on_resume_in_words();

// `value` in %g notation with the fewest digits (1 to 17) that parse back to it exactly;
// a whole number below 10^15 in magnitude as an integer.
std::string canonical_number(double value);

}  // namespace tandem::models
