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

// Checkpoints from before the correction (R2) existed trained without it.
std::string value_when_absent(const RunSetting& setting) {
  if (setting.flag == "--lazy-r1-correction") return "off";
  return setting.flag == "--r2-gamma" || setting.flag == "--pl-weight" ? "0" : "";
}

std::vector<RunSetting> run_settings(const TrainOptions& o, const std::string& backend,
                                     const std::string& data_identity) {
  auto value = [](const std::string& flag, std::string text, bool kept = false) {
    return RunSetting{.flag = flag, .value = std::move(text), .is_switch = false, .kept_on_resume = kept};
  };
  auto integer = [&](const std::string& flag, int64_t n, bool kept = false) {
    return value(flag, std::to_string(n), kept);
  };
  auto number = [&](const std::string& flag, double x, bool kept = false) {
    return value(flag, canonical_number(x), kept);
  };
  auto on_off = [](const std::string& flag, bool on, bool kept = false) {
    return RunSetting{.flag = flag, .value = on ? "on" : "off", .is_switch = true, .kept_on_resume = kept};
  };
  const bool pggan = o.model == "pggan";
  // pggan's stages follow the resolved length; the other models ignore the flag.
  const int64_t stage_iters = pggan ? pggan_stage_iters(o) : o.pggan_stage_iters;
  return {
      value("--model", o.model),
      value("--data", data_identity.empty() ? o.data : o.data + " (" + data_identity + ")", true),
      integer("--channels", o.channels, true),
      integer("--width", o.width, true),
      on_off("--skip-bad-images", o.skip_bad_images),
      integer("--max-image-side", o.max_image_side),
      integer("--iters", o.iters),
      integer("--batch", o.batch, true),
      integer("--global-batch", o.global_batch, true),
      number("--lr", o.lr, true),
      value("--lr-schedule", o.lr_schedule, true),
      number("--clip-grad", o.clip_grad, true),
      value("--clip-grad-type", to_string(o.clip_grad_type), true),
      integer("--accumulate", o.accumulate, true),
      number("--ema-decay", o.ema_decay),
      number("--ema-kimg", o.ema_kimg),
      number("--ema-rampup", o.ema_rampup),
      value("--wrap", wrap_mode_name(o.wrap)),
      on_off("--prepare", o.explicit_prepare),
      on_off("--sync-bn", o.sync_bn),
      number("--bucket-cap-mb", o.bucket_cap_mb),
      value("--backend", backend),
      value("--device", to_string(o.device)),
      value("--seed", std::to_string(o.seed), true),
      integer("--ckpt-every", o.ckpt_every),
      on_off("--resume", o.resume),
      on_off("--resume-allow-fresh", o.resume_allow_fresh),
      on_off("--resume-skip-damaged", o.resume_skip_damaged),
      on_off("--overwrite", o.overwrite),
      integer("--sample-every", o.sample_every),
      integer("--log-every", o.log_every),
      on_off("--dynamic", o.dynamic, true),
      value("--loss", to_string(o.loss), true),
      number("--gp-lambda", o.gp_lambda, true),
      integer("--n-critic", o.n_critic, true),
      number("--r1-gamma", o.r1_gamma, true),
      integer("--r1-every", o.r1_every, true),
      number("--r2-gamma", o.r2_gamma, true),
      number("--pl-weight", o.pl_weight, true),
      integer("--pl-every", o.pl_every, o.pl_weight > 0),
      number("--pl-decay", o.pl_decay, o.pl_weight > 0),
      integer("--pl-batch-shrink", o.pl_batch_shrink, o.pl_weight > 0),
      number("--style-mixing", o.style_mixing, o.model == "stylegan2"),
      value("--lazy-r1-correction", o.lazy_r1_correction ? "on" : "off",
            (o.r1_gamma > 0 && o.r1_every > 1) || (o.pl_weight > 0 && o.pl_every > 1)),
      number("--data-fraction", o.data_fraction, true),
      value("--augment", o.augment.any() ? o.augment.str() : "off", true),
      number("--augment-target", o.augment_target, true),
      number("--augment-kimg", o.augment_kimg, true),
      integer("--pggan-stage-iters", stage_iters, pggan),
      value("--on-nonfinite", to_string(o.on_nonfinite)),
      integer("--max-nonfinite-steps", o.max_nonfinite_steps),  // every rank stops at the same count
      on_off("--cuda-graphs", o.cuda_graphs),  // replays skip the agreement: on or off everywhere
      on_off("--trace", !o.trace.empty()),     // a collective at start and end: on or off everywhere
      integer("--trace-steps", o.trace_steps),
      on_off("--tensorboard", !o.tensorboard.empty()),
      integer("--fid-every", o.fid_every),  // collectives: the same everywhere
      integer("--fid-samples", o.fid_samples),
      on_off("--fid-cache", !o.fid_cache.empty()),  // a path that may differ per node
      integer("--check-replicas-every", o.check_replicas_every),
      on_off("--detect-anomalous-params", o.detect_anomalous_params),
  };
}

}  // namespace tandem::models
