// tandem-train's checkpoints: <dir>/ckpt-<iteration>.safetensors, each the whole state of a
// run (the model, both optimizers, the moving average) and what a resume must match.
//
// Contract:
// - save(i) writes path(i) = <dir>/ckpt-<i, zero-padded to 6 digits>.safetensors
//   atomically (a .tmp renamed over it; see runtime/checkpoint.h), with the tensors
//   "model.<name>", "optim.generator.<name>", "optim.discriminator.<name>" and "ema.<k>",
//   and the metadata model (its type name), iteration, world_size, and each run setting
//   marked kept_on_resume under its metadata_key() (which ones: run_settings.cpp's table,
//   run_settings.h); returns the path.
// - scan() lists the files in `dir` named like checkpoints (<prefix>-<digits>.safetensors;
//   .tmp files are saves cut short and never count), newest first, each with `problem`:
//   why it cannot be read (its header does not validate, or it is not a regular file),
//   the message starting with the path; "" when its header validates. newest() is the
//   first without a problem, nullopt when there is none. scan_for_resume() is scan() with
//   the data checked too, newest first, up to the first file that loads whole with its
//   checksum verified (load_safetensors), kept in `loaded` for load(): a flipped data byte
//   is a `problem` as a damaged header is, and older files are not read.
// - choose_resume(scan, dir, allow_fresh, skip_damaged) is --resume's decision. The newest
//   readable file is the one to resume from. A damaged file newer than it stops the run:
//   `refusal` names each such file and its problem, and --resume-skip-damaged; with
//   skip_damaged, each is passed over with a warning "--resume skips <problem>" instead.
//   When files exist but none is readable, `refusal` lists each with its problem and names
//   --resume-allow-fresh, unless allow_fresh: then `path` is "" (start from iteration 0)
//   and the warnings say so. Without any file the same: `refusal` names `dir` and
//   --resume-allow-fresh, or with allow_fresh a warning naming `dir`. `older` is the next
//   older readable file after `path`, for the message when `path` fails to load.
// - load(path) first verifies that the checkpoint fits this run (verify_compatible), each
//   mismatch an Error starting with the path: a tandem-train checkpoint of the same model,
//   written at the same world size unless the run is elastic (--global-batch; the refusal
//   names it); every kept setting it records must equal this run's (elastic: --batch, the
//   per-rank share, is not compared, the global batch is; a checkpoint that does not record
//   its global batch resumes at its own world size only) ("written with --lr 0.0002, this
//   run has --lr 0.001", all differing ones named; a resume continues the same run, so such
//   a flag is refused, never overridden); the optimizers' learning rate must be this run's
//   --lr, or with a scheduler the rate its schedule gives at the checkpoint's iteration
//   (the schedule is a function of the iteration: the spec in the metadata, the iteration
//   and that rate are all of its state). Checkpoints written before a setting was recorded
//   resume without comparing it, or as if written with value_when_absent (run_settings.h:
//   no --lazy-r1-correction is "off"), named only when no recorded setting differs (their
//   --lr is still compared: the optimizer state holds it). Then it restores (restore) the
//   model, both optimizers and the average through a Checkpoint (models/training/checkpoint.h: all or
//   nothing), and returns the checkpoint's iteration. Tensors that do not fit, or belong to
//   none of them, are an Error "<path>: does not fit this model: ..." naming each; a
//   checkpoint without the average (--ema-decay 0) cannot resume a run that keeps one (a
//   run without one ignores the file's). Before anything is restored: every floating-point
//   tensor must be finite, every tensor in the dtype it restores into (a converted file
//   would not continue the run bit for bit), and the metadata integers (iteration,
//   world_size) plain decimal integers in range, each problem an Error naming the file and
//   the tensor or key; the optimizers refuse missing, non-finite or impossible state
//   (optim::Optimizer::load_state_dict). A file that fails load() is an Error: nothing
//   falls back to an older checkpoint on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/lr_scheduler.h"
#include "autograd/optim.h"
#include "models/gan.h"
#include "models/train/run_settings.h"
#include "models/training/checkpoint.h"
#include "runtime/checkpoint.h"
#include "runtime/tensor.h"

namespace tandem::models {

constexpr const char* kCheckpointPrefix = "ckpt";

// What a checkpoint records of its run besides the model.
struct RunIdentity {
  int world_size = 1;  // a resume must match it, unless elastic
  // --global-batch: a resume may change the world size (each rank's rows of the global batch
  // follow from it); the global batch must match then, not the per-rank --batch.
  bool elastic = false;
  std::vector<RunSetting> settings;  // those kept_on_resume are recorded and must match
};

// A file named like a checkpoint; `problem` says why it cannot be read ("" when it can).
struct CheckpointFile {
  std::string path;
  int64_t iteration = 0;
  std::string problem;
  std::shared_ptr<const SafetensorsFile> loaded;  // scan_for_resume's choice, read once
};

// What --resume does (see choose_resume).
struct ResumeChoice {
  std::string path;                   // the checkpoint to resume from; "": iteration 0
  std::string older;                  // the next older readable checkpoint, if any
  std::vector<std::string> warnings;  // for rank 0 to print
  std::string refusal;                // when not empty, --resume must stop with it
};

ResumeChoice choose_resume(const std::vector<CheckpointFile>& files, const std::string& dir, bool allow_fresh,
                           bool skip_damaged);

// Handles on the state of the live run that a checkpoint holds.
struct TrainState {
  GanModel& model;
  optim::Optimizer& opt_g;
  optim::Optimizer& opt_d;
  std::vector<Tensor>& ema;  // the moving average of G's weights; empty when off
  // The run's learning-rate schedule (null: the rate is --lr throughout).
  const optim::LrScheduler* scheduler = nullptr;
  // --augment-target: the adaptive p's state (adaptive_augment.h), "augment.0"; null: none.
  std::vector<Tensor>* augment = nullptr;
  // --precision fp16: each part's loss scale (loss_scaler.h), "scaler.generator.0" ...;
  // null: none.
  std::vector<Tensor>* scaler_g = nullptr;
  std::vector<Tensor>* scaler_d = nullptr;
};

class Checkpointer {
 public:
  Checkpointer(std::string dir, RunIdentity run, TrainState state);

  std::string path(int64_t iteration) const;
  std::vector<CheckpointFile> scan() const;
  std::vector<CheckpointFile> scan_for_resume() const;
  std::optional<std::string> newest() const;
  std::string save(int64_t iteration) const;
  // `loaded`: the file's contents when already read (scan_for_resume), else it is read here.
  int64_t load(const std::string& path, const SafetensorsFile* loaded = nullptr) const;

 private:
  // load's two steps: every check that the file fits this run (nothing is restored yet),
  // returning its iteration; then the restore, all or nothing.
  int64_t verify_compatible(const std::string& path, const SafetensorsFile& file) const;
  void restore(const std::string& path, SafetensorsFile file) const;
  // The generic checkpoint of this run's state: "model", "optim.generator",
  // "optim.discriminator" and "ema" (train_checkpoint.h).
  training::Checkpoint checkpoint() const;

  std::string dir_;
  RunIdentity run_;
  TrainState state_;
};

// The generator of a tandem-train checkpoint, to sample from it outside a run (FID of a
// checkpoint: tandem-fid-features --checkpoint). The model is the one its metadata names,
// built by make_gan with that name (ring8-mlp, mlp, mlp (dynamic), dcgan: architectures
// their name fixes; any other is an Error naming it), its "model.*" tensors loaded, and G's
// parameters replaced by the moving average ("ema.<k>") when the file holds one
// (`from_average` says so). Errors name the file.
struct CheckpointGenerator {
  std::shared_ptr<GanModel> model;
  bool from_average = false;
};
CheckpointGenerator load_checkpoint_generator(const std::string& path);

}  // namespace tandem::models
