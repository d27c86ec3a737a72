#include "models/train/run_settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tandem::models {

std::string RunSetting::as_written() const {
  if (!is_switch) return flag + " " + value;
  return value == "on" ? flag : "no " + flag;
}

std::string RunSetting::metadata_key() const {
  std::string key = flag.rfind("--", 0) == 0 ? flag.substr(2) : flag;
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

// %g (fixed notation down to 1e-4, as users write learning rates) at the fewest digits that
// read back exactly. Whole numbers as users write them ("10", where %g says "1e+01").
std::string canonical_number(double value) {
  char text[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof text, "%.0f", value);
    return text;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  return text;
}

// Checkpoints from before the correction (R2, path length, style mixing) existed trained
// without it.
std::string value_when_absent(const RunSetting& setting) {
  if (setting.flag == "--lazy-r1-correction") return "off";
  const bool off_before =
      setting.flag == "--r2-gamma" || setting.flag == "--pl-weight" || setting.flag == "--style-mixing";
  if (setting.flag == "--precision") return "fp32";  // before reduced precision: float32
  if (setting.flag == "--low-precision-res") return "all";
  if (setting.flag == "--penalty-scaling") return "unscaled";
  return off_before ? "0" : "";
}

namespace {

// A row's resume rule: the OnResume kind, whether it applies to this run, and its note.
struct Resume {
  OnResume rule = OnResume::may_change;
  bool applies = false;
  const char* note = "";
};

constexpr Resume kMayChange{};

// Kept on every resume; `note`, when given, says how it is compared.
constexpr Resume kept(const char* note = "") {
  return {.rule = OnResume::kept, .applies = true, .note = note};
}

// Kept on resume in the runs `condition` names (in words, for --resume's help), where `holds`.
constexpr Resume kept_when(bool holds, const char* condition) {
  return {.rule = OnResume::kept_when, .applies = holds, .note = condition};
}

RunSetting setting(const std::string& flag, std::string value, bool is_switch, Resume resume) {
  return {.flag = flag,
          .value = std::move(value),
          .is_switch = is_switch,
          .kept_on_resume = resume.applies,
          .on_resume = resume.rule,
          .resume_note = resume.note,
          .agreed_across_ranks = true};
}

}  // namespace

// The one table of what each setting is and how a resume treats it (run_settings.h).
std::vector<RunSetting> run_settings(const TrainOptions& o, const std::string& backend,
                                     const std::string& data_identity) {
  auto value = [](const std::string& flag, std::string text, Resume resume = kMayChange) {
    return setting(flag, std::move(text), false, resume);
  };
  auto integer = [&](const std::string& flag, int64_t n, Resume resume = kMayChange) {
    return value(flag, std::to_string(n), resume);
  };
  auto number = [&](const std::string& flag, double x, Resume resume = kMayChange) {
    return value(flag, canonical_number(x), resume);
  };
  auto on_off = [](const std::string& flag, bool on, Resume resume = kMayChange) {
    return setting(flag, on ? "on" : "off", true, resume);
  };
  const bool pggan = o.model == "pggan";
  // pggan's stages follow the resolved length; the other models ignore the flag.
  const int64_t stage_iters = pggan ? pggan_stage_iters(o) : o.pggan_stage_iters;
  const bool path_length = o.pl_weight > 0;
  const bool lazy = (o.r1_gamma > 0 && o.r1_every > 1) || (path_length && o.pl_every > 1);
  return {
      value("--model", o.model),
      value("--data", data_identity.empty() ? o.data : o.data + " (" + data_identity + ")", kept()),
      integer("--channels", o.channels, kept()),
      integer("--width", o.width, kept()),
      on_off("--skip-bad-images", o.skip_bad_images),
      integer("--max-image-side", o.max_image_side),
      integer("--iters", o.iters),
      integer("--batch", o.batch, kept("with --global-batch: the global batch")),
      integer("--global-batch", o.global_batch, kept()),  // the run's (for_world_size)
      number("--lr", o.lr, kept()),
      value("--lr-schedule", o.lr_schedule.str(), kept()),
      number("--clip-grad", o.clip_grad, kept()),
      value("--clip-grad-type", to_string(o.clip_grad_type), kept()),
      integer("--accumulate", o.accumulate, kept()),
      number("--ema-decay", o.ema_decay),
      number("--ema-kimg", o.ema_kimg),
      number("--ema-rampup", o.ema_rampup),
      value("--wrap", wrap_mode_name(o.wrap)),
      on_off("--prepare", o.explicit_prepare),
      on_off("--sync-bn", o.sync_bn),
      number("--bucket-cap-mb", o.bucket_cap_mb),
      value("--backend", backend),
      value("--device", to_string(o.device)),
      value("--seed", std::to_string(o.seed), kept()),
      integer("--ckpt-every", o.ckpt_every),
      on_off("--resume", o.resume),
      on_off("--resume-allow-fresh", o.resume_allow_fresh),
      on_off("--resume-skip-damaged", o.resume_skip_damaged),
      on_off("--overwrite", o.overwrite),
      integer("--sample-every", o.sample_every),
      integer("--log-every", o.log_every),
      on_off("--dynamic", o.dynamic, kept()),
      value("--loss", to_string(o.loss), kept()),
      number("--gp-lambda", o.gp_lambda, kept()),
      integer("--n-critic", o.n_critic, kept()),
      number("--r1-gamma", o.r1_gamma, kept()),
      integer("--r1-every", o.r1_every, kept()),
      number("--r2-gamma", o.r2_gamma, kept()),
      number("--pl-weight", o.pl_weight, kept()),
      integer("--pl-every", o.pl_every, kept_when(path_length, "with --pl-weight")),
      number("--pl-decay", o.pl_decay, kept_when(path_length, "with --pl-weight")),
      integer("--pl-batch-shrink", o.pl_batch_shrink, kept_when(path_length, "with --pl-weight")),
      number("--style-mixing", o.style_mixing, kept_when(o.model == "stylegan2", "stylegan2")),
      value("--lazy-r1-correction", o.lazy_r1_correction ? "on" : "off",
            kept_when(lazy, "with lazy R1 or lazy path length")),
      number("--data-fraction", o.data_fraction, kept()),
      value("--augment", o.augment.any() ? o.augment.str() : "off", kept()),
      number("--augment-target", o.augment_target, kept()),
      number("--augment-kimg", o.augment_kimg, kept()),
      integer("--pggan-stage-iters", stage_iters, kept_when(pggan, "pggan")),
      value("--on-nonfinite", to_string(o.on_nonfinite)),
      integer("--max-nonfinite-steps", o.max_nonfinite_steps),  // every rank stops at the same count
      value("--precision", precision_name(o.precision), kept()),
      value("--low-precision-res", o.low_precision_res_spec, kept()),
      number("--loss-scale-init", o.loss_scale_init),
      value("--penalty-scaling", o.scale_penalties ? "scaled" : "unscaled",
            kept_when(o.precision == DType::f16, "with --precision fp16")),
      on_off("--cuda-graphs", o.cuda_graphs),  // replays skip the agreement: on or off everywhere
      on_off("--trace", !o.trace.empty()),     // a collective at start and end: on or off everywhere
      integer("--trace-steps", o.trace_steps),
      on_off("--tensorboard", !o.tensorboard.empty()),
      integer("--fid-every", o.fid_every),  // collectives: the same everywhere
      integer("--fid-samples", o.fid_samples),
      value("--fid-network", o.fid_network),        // train: rank 0 trains, the others wait
      on_off("--fid-cache", !o.fid_cache.empty()),  // a path that may differ per node
      integer("--check-replicas-every", o.check_replicas_every),
      on_off("--detect-anomalous-params", o.detect_anomalous_params),
  };
}

// "--data, ..., --pl-every (with --pl-weight), ..., --r2-gamma (0 for a checkpoint from before it)".
std::string kept_on_resume_in_words() {
  std::string words;
  for (const RunSetting& s : run_settings(TrainOptions{}, "", "")) {
    if (s.on_resume == OnResume::may_change) continue;
    std::string notes = s.resume_note;
    const std::string absent = value_when_absent(s);
    if (!absent.empty()) notes += (notes.empty() ? "" : "; ") + absent + " for a checkpoint from before it";
    words += (words.empty() ? "" : ", ") + s.flag + (notes.empty() ? "" : " (" + notes + ")");
  }
  return words;
}

}  // namespace tandem::models
