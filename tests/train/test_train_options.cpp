// tandem-train's flags: parsing, and usage errors that name the flag (exit code 2).
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/reduced_precision.h"
#include "models/train/train_options.h"
#include "models/train/trainer.h"

using namespace tandem::models;
using tandem::UsageError;

TEST_CASE("flags parse in both spellings with sane defaults", "[options]") {
  TrainOptions o =
      parse_train_options({"--model", "mlp", "--iters=50", "--batch", "32", "--dynamic", "--wrap=separate"});
  CHECK(o.model == "mlp");
  CHECK(o.data == "fashion-mnist");
  CHECK(o.iters == 50);
  CHECK(o.batch == 32);
  CHECK(o.dynamic);
  CHECK(o.wrap == WrapMode::separate);
  TrainOptions d = parse_train_options({});
  CHECK(d.model == "ring8-mlp");
  CHECK(d.data == "ring8");
  CHECK(d.wrap == WrapMode::whole);
  CHECK_FALSE(d.sync_bn);
  CHECK(parse_train_options({"--model", "dcgan", "--sync-bn"}).sync_bn);
  CHECK_THROWS_WITH(parse_train_options({"--sync-bn=1"}), Catch::Contains("--sync-bn takes no value"));
}

TEST_CASE("bad flags are usage errors naming the flag", "[options][errors]") {
  CHECK_THROWS_WITH(parse_train_options({"--bogus"}), Catch::Contains("unknown flag '--bogus'"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "0"}),
                    Catch::Contains("--batch must be at least 1, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "-3"}),
                    Catch::Contains("--batch must be at least 1, got -3"));
  CHECK_THROWS_WITH(parse_train_options({"--batch=-3"}),
                    Catch::Contains("--batch must be at least 1, got -3"));
  CHECK_THROWS_WITH(parse_train_options({"--batch", "abc"}),
                    Catch::Contains("--batch needs an integer, got 'abc'"));
  CHECK_THROWS_WITH(parse_train_options({"--iters"}), Catch::Contains("--iters needs a value"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "vae"}), Catch::Contains("--model must be one of"));
  for (const char* bad : {"-1", "0", "inf", "nan", "1e999"}) {
    CHECK_THROWS_WITH(parse_train_options({"--lr", bad}), Catch::Contains("--lr") && Catch::Contains(bad));
  }
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--data", "ring8"}),
                    Catch::Contains("cannot train on --data ring8"));
  CHECK_THROWS_WITH(parse_train_options({"--dynamic"}),
                    Catch::Contains("--dynamic applies to --model mlp only"));
  CHECK_THROWS_WITH(parse_train_options({"--ema-decay", "1"}),
                    Catch::Contains("--ema-decay must be below 1"));
  CHECK(parse_train_options({"--ema-decay", "0"}).ema_decay == 0.0);
  CHECK_THROWS_WITH(parse_train_options({"--wrap", "none"}),
                    Catch::Contains("--wrap must be one of whole|separate, got 'none'"));
  CHECK_THROWS_AS(parse_train_options({"--wrap", "Whole"}), UsageError);
  CHECK_THROWS_WITH(parse_train_options({"--wrap", "separate", "--prepare"}),
                    Catch::Contains("--prepare goes with --wrap whole"));
}

TEST_CASE("wgan-gp and R1 flags: the paper's defaults unless given, and what goes with what", "[options]") {
  TrainOptions d = parse_train_options({});
  CHECK(d.loss == GanLoss::non_saturating);
  CHECK(d.n_critic == 1);
  CHECK(d.lr == 2e-4);
  CHECK(d.r1_gamma == 0.0);
  CHECK(d.r1_every == 1);
  CHECK(adam_betas(d.loss) == std::array<double, 2>{0.5, 0.999});
  TrainOptions w = parse_train_options({"--loss", "wgan-gp"});
  CHECK(w.n_critic == 5);
  CHECK(w.lr == 1e-4);
  CHECK(w.gp_lambda == 10.0);
  CHECK(adam_betas(w.loss) == std::array<double, 2>{0.0, 0.9});
  TrainOptions given =
      parse_train_options({"--loss=wgan-gp", "--n-critic", "2", "--lr", "3e-4", "--gp-lambda", "5"});
  CHECK(given.n_critic == 2);
  CHECK(given.lr == 3e-4);
  CHECK(given.gp_lambda == 5.0);
  TrainOptions r1 = parse_train_options({"--r1-gamma", "10", "--r1-every", "4", "--n-critic", "3"});
  CHECK(r1.r1_gamma == 10.0);
  CHECK(r1.r1_every == 4);
  CHECK(r1.n_critic == 3);
  CHECK(parse_train_options({"--r1-gamma", "0"}).r1_gamma == 0.0);
  // R3GAN's objective: the relativistic loss with R1 and R2; R2, like R1, goes with any loss
  // (also wgan-gp's) and is never lazy (it takes --r1-every as it comes).
  TrainOptions r3gan = parse_train_options({"--loss", "rpgan", "--r1-gamma", "0.5", "--r2-gamma", "0.5"});
  CHECK(r3gan.loss == GanLoss::relativistic);
  CHECK(std::string(to_string(r3gan.loss)) == "rpgan");
  CHECK(r3gan.r2_gamma == 0.5);
  CHECK(r3gan.n_critic == 1);
  CHECK(r3gan.lr == 2e-4);
  CHECK(d.r2_gamma == 0.0);
  CHECK(parse_train_options({"--loss", "wgan-gp", "--r2-gamma", "1"}).r2_gamma == 1.0);
  CHECK(parse_train_options({"--r1-gamma", "1", "--r1-every", "4", "--r2-gamma", "1"}).r2_gamma == 1.0);
}

TEST_CASE("bad wgan-gp and R1 flags are usage errors naming the flag", "[options][errors]") {
  CHECK_THROWS_WITH(parse_train_options({"--n-critic", "0"}),
                    Catch::Contains("--n-critic must be at least 1, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--loss", "wgan-gp", "--n-critic", "-2"}),
                    Catch::Contains("--n-critic must be at least 1, got -2"));
  CHECK_THROWS_WITH(parse_train_options({"--r1-gamma", "-1"}),
                    Catch::Contains("--r1-gamma must be a finite number >= 0 (0: off), got -1"));
  CHECK_THROWS_WITH(parse_train_options({"--r1-gamma", "nan"}), Catch::Contains("--r1-gamma must be"));
  CHECK_THROWS_WITH(parse_train_options({"--r1-gamma", "ten"}),
                    Catch::Contains("--r1-gamma needs a number, got 'ten'"));
  CHECK_THROWS_WITH(parse_train_options({"--r1-every", "4"}),
                    Catch::Contains("--r1-every goes with --r1-gamma (a positive value)"));
  CHECK_THROWS_WITH(parse_train_options({"--r1-gamma", "0", "--r1-every", "4"}),
                    Catch::Contains("--r1-every goes with --r1-gamma"));
  CHECK_THROWS_WITH(parse_train_options({"--r2-gamma", "-1"}),
                    Catch::Contains("--r2-gamma must be a finite number >= 0 (0: off), got -1"));
  CHECK_THROWS_WITH(parse_train_options({"--r2-gamma", "inf"}), Catch::Contains("--r2-gamma must be"));
  CHECK_THROWS_WITH(parse_train_options({"--ema-kimg", "10", "--ema-decay", "0.999"}),
                    Catch::Contains("--ema-kimg and --ema-decay do not go together"));
  CHECK_THROWS_WITH(parse_train_options({"--ema-rampup", "0.05"}),
                    Catch::Contains("--ema-rampup goes with --ema-kimg"));
  const TrainOptions half_life = parse_train_options({"--ema-kimg", "10", "--ema-rampup", "0.05"});
  CHECK((half_life.ema_kimg == 10 && half_life.ema_rampup == 0.05));
  CHECK_THROWS_WITH(
      parse_train_options({"--r1-gamma", "1", "--lazy-r1-correction", "off"}),
      Catch::Contains("--lazy-r1-correction goes with lazy R1 (--r1-gamma and --r1-every > 1)"));
  CHECK(parse_train_options({"--r1-gamma", "1", "--r1-every", "4"}).lazy_r1_correction);
  CHECK_FALSE(parse_train_options({"--r1-gamma", "1", "--r1-every", "4", "--lazy-r1-correction", "off"})
                  .lazy_r1_correction);
  CHECK_THROWS_WITH(parse_train_options({"--r1-gamma", "1", "--r1-every", "0"}),
                    Catch::Contains("--r1-every must be at least 1, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--gp-lambda", "5"}),
                    Catch::Contains("--gp-lambda goes with --loss wgan-gp"));
  CHECK_THROWS_WITH(parse_train_options({"--loss", "wgan-gp", "--gp-lambda", "0"}),
                    Catch::Contains("--gp-lambda must be a positive finite number, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--loss", "wgan"}),
                    Catch::Contains("--loss must be one of ns|hinge|wgan-gp|rpgan, got 'wgan'"));
}

TEST_CASE("the program exits with code 2 on a usage error and 0 on --help", "[options][program]") {
  // Built as one literal: GCC 12 at -O1 warns falsely (-Warray-bounds) of a concatenation here.
  const std::string bin = TANDEM_TEST_BIN_DIR "/tandem-train";
  int rc = std::system((bin + " --bogus-flag 2>/dev/null").c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 2);
  rc = std::system((bin + " --help >/dev/null").c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 0);
}

TEST_CASE("the switch --overwrite does not go with --resume", "[options]") {
  CHECK(parse_train_options({"--overwrite"}).overwrite);
  CHECK_FALSE(parse_train_options({}).overwrite);
  CHECK_THROWS_WITH(parse_train_options({"--resume", "--overwrite"}),
                    Catch::Contains("--overwrite and --resume do not go together"));
}

TEST_CASE("the switch --resume-allow-fresh goes with --resume", "[options]") {
  CHECK(parse_train_options({"--resume", "--resume-allow-fresh"}).resume_allow_fresh);
  CHECK_FALSE(parse_train_options({"--resume"}).resume_allow_fresh);
  CHECK_THROWS_WITH(parse_train_options({"--resume-allow-fresh"}),
                    Catch::Contains("--resume-allow-fresh goes with --resume"));
}

TEST_CASE("the trace flags: off, the last 200 steps by default, --trace-steps goes with --trace",
          "[options]") {
  const TrainOptions d = parse_train_options({});
  CHECK(d.trace.empty());
  CHECK(d.trace_steps == 200);
  const TrainOptions o = parse_train_options({"--trace", "t.json", "--trace-steps", "0"});
  CHECK(o.trace == "t.json");
  CHECK(o.trace_steps == 0);  // every step
  CHECK_THROWS_WITH(parse_train_options({"--trace", "t.json", "--trace-steps", "-1"}),
                    Catch::Contains("--trace-steps must be at least 0, got -1"));
  CHECK_THROWS_WITH(parse_train_options({"--trace-steps", "10"}),
                    Catch::Contains("--trace-steps goes with --trace"));
}

TEST_CASE("the run's first line says the precision, its layers and the kernels it runs on",
          "[options][precision]") {
  CHECK(precision_summary(parse_train_options({})).empty());
  CHECK(precision_summary(parse_train_options({"--precision", "fp16"})) ==
        "fp16 in every layer on " + tandem::kernels::reduced_precision_kernels(tandem::DType::f16, false));
  TrainOptions o =
      parse_train_options({"--model", "dcgan64", "--precision", "bf16", "--low-precision-res", "2"});
  o.device = tandem::DeviceKind::cuda;  // as --device cuda would, on a build or machine without a GPU too
  CHECK(precision_summary(o) == "bf16 in the 2 highest resolution(s) on " +
                                    tandem::kernels::reduced_precision_kernels(tandem::DType::bf16, true));
}

TEST_CASE("the precision flags: fp32 by default, the layers, the loss scale, and what they refuse",
          "[options][precision]") {
  const TrainOptions d = parse_train_options({});
  CHECK(d.precision == tandem::DType::f32);
  CHECK(d.low_precision_res == -1);
  CHECK(parse_train_options({"--precision", "bf16"}).precision == tandem::DType::bf16);
  const TrainOptions o = parse_train_options(
      {"--model", "dcgan64", "--precision", "fp16", "--low-precision-res", "2", "--loss-scale-init", "1024"});
  CHECK(o.precision == tandem::DType::f16);
  CHECK(o.low_precision_res == 2);
  CHECK(o.loss_scale_init == 1024);
  CHECK(parse_train_options({"--precision", "bf16", "--low-precision-res", "all"}).low_precision_res == -1);
  CHECK_THROWS_WITH(parse_train_options({"--precision", "fp64"}), Catch::Contains("--precision"));
  CHECK_THROWS_WITH(
      parse_train_options({"--model", "dcgan", "--precision", "bf16", "--low-precision-res", "0"}),
      Catch::Contains("--low-precision-res 0: say all, or a whole number of resolutions >= 1"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--low-precision-res", "2"}),
                    Catch::Contains("--low-precision-res goes with --precision bf16 or fp16"));
  CHECK_THROWS_WITH(
      parse_train_options({"--model", "mlp", "--precision", "bf16", "--low-precision-res", "1"}),
      Catch::Contains("--model mlp has no layers of one resolution each"));
  CHECK_THROWS_WITH(parse_train_options({"--precision", "bf16", "--loss-scale-init", "8"}),
                    Catch::Contains("--loss-scale-init goes with --precision fp16"));
  for (const char* policy : {"stop", "scrub"}) {
    CHECK_THROWS_WITH(
        parse_train_options({"--precision", "fp16", "--on-nonfinite", policy}),
        Catch::Contains(std::string("--precision fp16 does not go with --on-nonfinite ") + policy));
  }
  CHECK(parse_train_options({"--precision", "fp16", "--on-nonfinite", "skip"}).precision ==
        tandem::DType::f16);
  for (const char* model : {"stylegan2", "r3gan"}) {
    CHECK(parse_train_options({"--model", model, "--precision", "bf16", "--low-precision-res", "2"})
              .low_precision_res == 2);
  }
  // The penalties' inner gradient: unscaled unless asked, and only fp16 has a scale to take.
  CHECK_FALSE(d.scale_penalties);
  CHECK(parse_train_options({"--precision", "fp16", "--penalty-scaling", "scaled"}).scale_penalties);
  CHECK_FALSE(parse_train_options({"--precision", "fp16", "--penalty-scaling", "unscaled"}).scale_penalties);
  CHECK_THROWS_WITH(parse_train_options({"--precision", "bf16", "--penalty-scaling", "scaled"}),
                    Catch::Contains("--penalty-scaling goes with --precision fp16"));
  // What the model is built with.
  const GanConfig config =
      gan_config(parse_train_options({"--model", "stylegan2", "--precision", "fp16", "--low-precision-res",
                                      "2", "--penalty-scaling", "scaled"}));
  CHECK(config.precision == tandem::DType::f16);
  CHECK(config.low_precision_res == 2);
  CHECK(config.objective.scale_penalties);
  CHECK_FALSE(gan_config(parse_train_options({"--precision", "fp16"})).objective.scale_penalties);
}

TEST_CASE("the TensorBoard folder flag: off by default, refused by a build without Protobuf", "[options]") {
  CHECK(parse_train_options({}).tensorboard.empty());
  CHECK_THROWS_WITH(parse_train_options({"--tensorboard", ""}),
                    Catch::Contains("--tensorboard needs a folder name"));
#if TANDEM_HAVE_TENSORBOARD
  CHECK(parse_train_options({"--tensorboard", "runs/tb"}).tensorboard == "runs/tb");
#else
  CHECK_THROWS_WITH(parse_train_options({"--tensorboard", "runs/tb"}),
                    Catch::Contains("--tensorboard needs a tandem built with Protobuf") &&
                        Catch::Contains("libprotobuf-dev"));
#endif
}

TEST_CASE("optimiser flags: --lr-schedule, --clip-grad, --accumulate, --detect-anomalous-params",
          "[options]") {
  TrainOptions d = parse_train_options({});
  CHECK(d.lr_schedule.str() == "constant");
  CHECK(d.clip_grad == 0.0);
  CHECK(d.clip_grad_type == ClipGradType::l2);
  CHECK(d.accumulate == 1);
  CHECK_FALSE(d.detect_anomalous_params);
  TrainOptions o = parse_train_options({"--lr-schedule", "warmup:5+multistep:10,20", "--clip-grad", "1.5",
                                        "--clip-grad-type=inf", "--accumulate", "4", "--ckpt-every", "8",
                                        "--detect-anomalous-params"});
  CHECK(o.lr_schedule.str() == "warmup:5:0.001+multistep:10,20:0.1");  // canonical
  CHECK(o.clip_grad == 1.5);
  CHECK(o.clip_grad_type == ClipGradType::inf);
  CHECK(o.accumulate == 4);
  CHECK(o.detect_anomalous_params);
  CHECK(parse_train_options({"--clip-grad", "0"}).clip_grad == 0.0);
}

TEST_CASE("bad optimiser flags are usage errors naming the flag", "[options][errors]") {
  auto refused = [](std::vector<std::string> args, const std::string& message) {
    INFO(args[0] << " " << args[1]);
    CHECK_THROWS_WITH(parse_train_options(args), Catch::Contains(message));
    CHECK_THROWS_AS(parse_train_options(args), UsageError);
  };
  refused({"--clip-grad", "-1"}, "--clip-grad must be a finite number >= 0 (0: off), got -1");
  refused({"--clip-grad", "inf"}, "--clip-grad must be a finite number >= 0");
  refused({"--clip-grad", "1", "--clip-grad-type", "1"}, "--clip-grad-type must be one of 2|inf, got '1'");
  refused({"--clip-grad-type", "inf"}, "--clip-grad-type goes with --clip-grad");
  refused({"--lr-schedule", "cosine"},
          "--lr-schedule: learning-rate schedule 'cosine': 'cosine' takes 1 or 2");
  refused({"--lr-schedule", "poly:5"},
          "--lr-schedule: learning-rate schedule 'poly:5': unknown schedule 'poly'");
  refused({"--accumulate", "0"}, "--accumulate must be at least 1, got 0");
  refused({"--accumulate", "2", "--loss", "wgan-gp"},
          "--accumulate 2 does not go with --n-critic 5 (wgan-gp's default)");
  refused({"--accumulate", "2", "--r1-gamma", "1", "--r1-every", "4"},
          "--accumulate 2 does not go with lazy R1");
  refused({"--accumulate", "3", "--ckpt-every", "10"}, "--ckpt-every 10 is not a multiple of --accumulate 3");
  refused({"--detect-anomalous-params=1", "x"}, "--detect-anomalous-params takes no value");
}

TEST_CASE("the global batch flag: each rank's share of B, refused with --batch and where it does not divide",
          "[options][global_batch]") {
  const TrainOptions o = parse_train_options({"--global-batch", "12"});
  CHECK(o.global_batch == 12);
  for (auto [world, share] : {std::pair{1, 12}, {2, 6}, {3, 4}, {4, 3}, {12, 1}}) {
    INFO(world << " ranks");
    const TrainOptions at = for_world_size(o, world);
    CHECK(at.batch == share);
    CHECK(at.global_batch == 12);
  }
  // Without it, --batch per rank: the run's global batch grows with the ranks.
  const TrainOptions per_rank = for_world_size(parse_train_options({"--batch", "5"}), 3);
  CHECK(per_rank.batch == 5);
  CHECK(per_rank.global_batch == 15);
  CHECK(parse_train_options({"--model", "dcgan64", "--global-batch", "8"}).global_batch == 8);
  CHECK_THROWS_WITH(for_world_size(parse_train_options({"--global-batch", "10"}), 4),
                    Catch::Contains("--global-batch 10 does not divide over 4 rank(s)"));
  CHECK_THROWS_WITH(for_world_size(parse_train_options({"--global-batch", "3"}), 4),
                    Catch::Contains("--global-batch 3 does not divide over 4 rank(s)"));
  CHECK_THROWS_WITH(parse_train_options({"--global-batch", "12", "--batch", "6"}),
                    Catch::Contains("--global-batch and --batch do not go together"));
  CHECK_THROWS_AS(parse_train_options({"--batch", "6", "--global-batch", "12"}), UsageError);
  CHECK_THROWS_WITH(parse_train_options({"--global-batch", "0"}),
                    Catch::Contains("--global-batch must be at least 1, got 0"));
}

TEST_CASE("dcgan64: batch 128 unless given, and --width goes with it alone", "[options]") {
  CHECK(parse_train_options({"--model", "dcgan64"}).batch == 128);
  CHECK(parse_train_options({"--model", "dcgan64", "--batch", "8"}).batch == 8);
  CHECK(parse_train_options({"--model", "dcgan"}).batch == 64);  // the others keep theirs
  CHECK(parse_train_options({"--model", "dcgan64"}).width == 0);
  CHECK(parse_train_options({"--model", "dcgan64", "--width", "8"}).width == 8);
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--width", "8"}),
                    Catch::Contains("--width applies to --model dcgan64 only"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan64", "--width", "0"}),
                    Catch::Contains("--width must be at least 1, got 0"));
}

TEST_CASE("stylegan2's style mixing: 0.9 unless given, a probability, stylegan2's alone",
          "[options][stylegan2]") {
  CHECK(parse_train_options({"--model", "stylegan2"}).style_mixing == 0.9);
  CHECK(parse_train_options({"--model", "stylegan2", "--style-mixing", "0"}).style_mixing == 0.0);
  CHECK(parse_train_options({"--model", "stylegan2", "--style-mixing", "1"}).style_mixing == 1.0);
  CHECK(parse_train_options({"--model", "dcgan"}).style_mixing == 0.0);
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--style-mixing", "0.5"}),
                    Catch::Contains("--style-mixing applies to --model stylegan2 only"));
  for (const char* bad : {"-0.1", "1.5"})
    CHECK_THROWS_WITH(parse_train_options({"--model", "stylegan2", "--style-mixing", bad}),
                      Catch::Contains("--style-mixing is a probability in [0, 1]"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "stylegan2", "--style-mixing", "nan"}),
                    Catch::Contains("--style-mixing needs a finite number"));
}

TEST_CASE("r3gan: rpgan with R1 and R2 of gamma 0.1 and Adam betas (0, 0.99) unless given",
          "[options][r3gan]") {
  const TrainOptions r = parse_train_options({"--model", "r3gan"});
  CHECK(r.loss == GanLoss::relativistic);
  CHECK(r.r1_gamma == 0.1);
  CHECK(r.r2_gamma == 0.1);
  CHECK(r.r1_every == 1);
  CHECK(r.batch == 64);
  CHECK(adam_betas(r.loss, r.model) == std::array<double, 2>{0.0, 0.99});
  // Each flag given keeps its value; the others keep r3gan's.
  const TrainOptions ns = parse_train_options({"--model", "r3gan", "--loss", "ns"});
  CHECK(ns.loss == GanLoss::non_saturating);
  CHECK(ns.r1_gamma == 0.1);
  const TrainOptions r1 = parse_train_options({"--model", "r3gan", "--r1-gamma", "2", "--r2-gamma", "0"});
  CHECK(r1.loss == GanLoss::relativistic);
  CHECK(r1.r1_gamma == 2.0);
  CHECK(r1.r2_gamma == 0.0);
  // The other models keep theirs.
  const TrainOptions dcgan = parse_train_options({"--model", "dcgan"});
  CHECK(dcgan.loss == GanLoss::non_saturating);
  CHECK(dcgan.r1_gamma == 0.0);
  CHECK(dcgan.r2_gamma == 0.0);
  CHECK(adam_betas(dcgan.loss, dcgan.model) == std::array<double, 2>{0.5, 0.999});
}

TEST_CASE("image folder flags: --data images needs --data-dir and the others go with it", "[options]") {
  TrainOptions o = parse_train_options(
      {"--model", "dcgan", "--data", "images", "--data-dir", "pics", "--channels", "3", "--skip-bad-images"});
  CHECK(o.data == "images");
  CHECK(o.data_dir == "pics");
  CHECK(o.channels == 3);
  CHECK(o.skip_bad_images);
  CHECK(parse_train_options({"--model", "dcgan"}).channels == 1);
  CHECK_FALSE(parse_train_options({"--model", "dcgan"}).skip_bad_images);
  CHECK(parse_train_options({"--model", "dcgan"}).max_image_side == 16384);
  CHECK(parse_train_options({"--model", "dcgan", "--max-image-side", "40000"}).max_image_side == 40000);
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--max-image-side", "0"}),
                    Catch::Contains("--max-image-side must be at least 1, got 0"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--data", "images"}),
                    Catch::Contains("--data images needs --data-dir DIR"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--skip-bad-images"}),
                    Catch::Contains("--skip-bad-images goes with --data images"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--channels", "3"}),
                    Catch::Contains("--channels 3 goes with --data images"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--channels", "2"}),
                    Catch::Contains("--channels must be one of 1|3, got '2'"));
  CHECK_THROWS_WITH(parse_train_options({"--data", "images", "--data-dir", "pics"}),
                    Catch::Contains("--model ring8-mlp cannot train on --data images"));
}

TEST_CASE("cuda graphs: the flag needs --device cuda and refuses what a replayed step cannot repeat",
          "[options][errors][cuda-graphs]") {
  CHECK_FALSE(parse_train_options({}).cuda_graphs);
  CHECK(parse_train_options({"--device", "cuda", "--cuda-graphs"}).cuda_graphs);
  CHECK(parse_train_options({"--cuda-graphs", "--model", "dcgan", "--device=cuda"}).cuda_graphs);
  CHECK_THROWS_WITH(parse_train_options({"--cuda-graphs"}),
                    Catch::Contains("--cuda-graphs needs --device cuda") && Catch::Contains("--device cpu"));
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--clip-grad", "1"}, "--clip-grad"},
      {{"--accumulate", "2"}, "--accumulate"},
      {{"--on-nonfinite", "skip"}, "--on-nonfinite skip"},
      {{"--n-critic", "2"}, "--n-critic 2"},
      {{"--loss", "wgan-gp"}, "--n-critic 5 (wgan-gp's default; pass --n-critic 1)"},
      {{"--r1-gamma", "1", "--r1-every", "4"}, "lazy R1 (--r1-every 4"},
      {{"--check-replicas-every", "3"}, "--check-replicas-every"},
      {{"--model", "dcgan", "--sync-bn"}, "--sync-bn"},
  };
  for (const auto& [flags, named] : refused) {
    std::vector<std::string> args = {"--device", "cuda", "--cuda-graphs"};
    args.insert(args.end(), flags.begin(), flags.end());
    INFO(named);
    CHECK_THROWS_WITH(parse_train_options(args), Catch::Contains("--cuda-graphs does not go with " + named));
  }
  // What a replay repeats exactly is allowed: wgan-gp with one D step per G step, R1 in every D loss.
  CHECK_NOTHROW(
      parse_train_options({"--device", "cuda", "--cuda-graphs", "--loss", "wgan-gp", "--n-critic", "1"}));
  CHECK_NOTHROW(parse_train_options({"--device", "cuda", "--cuda-graphs", "--r1-gamma", "1"}));
}

TEST_CASE("augmentation groups parse in any order, canonically; the augmentation flags go together",
          "[options][augment]") {
  TrainOptions o =
      parse_train_options({"--model", "mlp", "--augment", "cutout,color", "--augment-target", "0.6"});
  CHECK(o.augment.str() == "color,cutout");
  CHECK(o.augment_target == 0.6);
  CHECK(o.augment_kimg == 100);
  CHECK_FALSE(parse_train_options({"--model", "mlp", "--augment", "none"}).augment.any());
  CHECK(parse_train_options({"--model", "mlp", "--data-fraction", "0.1"}).data_fraction == 0.1);
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--augment", "color,flip"}),
                    Catch::Contains("--augment: augmentation 'flip'"));
  CHECK_THROWS_WITH(parse_train_options({"--augment", "color"}),
                    Catch::Contains("--augment goes with the image models"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--augment-target", "0.6"}),
                    Catch::Contains("--augment-target goes with --augment"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--augment", "color", "--augment-kimg", "5"}),
                    Catch::Contains("--augment-kimg goes with --augment-target"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--augment", "color", "--augment-target", "1"}),
                    Catch::Contains("--augment-target"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--data-fraction", "1.5"}),
                    Catch::Contains("--data-fraction is a fraction in (0, 1]"));
}

TEST_CASE("the FID flags are refused where FID does not apply, naming the flag", "[train][options][fid]") {
  CHECK(parse_train_options({}).fid_every == 0);
  const TrainOptions on =
      parse_train_options({"--model", "mlp", "--fid-every", "200", "--fid-samples", "500"});
  CHECK(on.fid_every == 200);
  CHECK(on.fid_samples == 500);
  CHECK_THROWS_WITH(
      parse_train_options({"--fid-every", "100"}),
      Catch::Contains("--fid-every needs --data fashion-mnist") && Catch::Contains("ring8-mlp"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "pggan", "--fid-every", "100"}),
                    Catch::Contains("--fid-every needs") && Catch::Contains("pggan"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "dcgan", "--channels", "3", "--data", "images",
                                         "--data-dir", "/tmp", "--fid-every", "100"}),
                    Catch::Contains("--fid-every needs") && Catch::Contains("--channels 3"));
  for (const char* model : {"dcgan64", "r3gan", "stylegan2"})
    CHECK(parse_train_options({"--model", model, "--fid-every", "100", "--log-every", "100"}).fid_every ==
          100);
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--fid-every", "150", "--log-every", "100"}),
                    Catch::Contains("--fid-every 150 must be a multiple of --log-every 100"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--fid-samples", "100"}),
                    Catch::Contains("--fid-samples goes with --fid-every"));
  CHECK_THROWS_WITH(parse_train_options({"--model", "mlp", "--fid-cache", "/tmp/x"}),
                    Catch::Contains("--fid-cache goes with --fid-every"));
}

namespace {

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string help_of(const std::string& flag) {
  TrainOptions defaults;
  const tandem::CommandLine table = train_command_line(defaults);
  for (const tandem::CommandLine::Flag& f : table.flags()) {
    if (f.name == flag) return f.help;
  }
  FAIL("no " << flag << " in the flag table");
  throw;
}

// Each conflict of `table`: its example parses alone and brings it (and no other of the
// table); with `refusing` added the refusal is the table's words; the refusing flag's help
// lists it.
void check_conflicts(const std::vector<FlagConflict>& table, const std::vector<std::string>& base,
                     const std::vector<std::string>& refusing, const std::string& refused_as) {
  const std::string help = help_of(refusing.front());
  for (const FlagConflict& c : table) {
    INFO(refusing.front() << " with " << c.listed_as << " (" << c.example << ")");
    std::vector<std::string> args = base;
    for (const std::string& w : words_of(c.example)) args.push_back(w);
    const TrainOptions without = parse_train_options(args);
    int applying = 0;
    for (const FlagConflict& other : table) applying += other.applies(without) ? 1 : 0;
    CHECK(c.applies(without));
    CHECK(applying == 1);
    const FlagGiven given = [&args](const std::string& flag) {
      return std::find(args.begin(), args.end(), flag) != args.end();
    };
    args.insert(args.end(), refusing.begin(), refusing.end());
    CHECK_THROWS_MATCHES(parse_train_options(args), UsageError,
                         Catch::Message(refused_as + " does not go with " + c.reason(without, given)));
    CHECK(help.find(c.listed_as) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("what --cuda-graphs and --accumulate refuse is one table each, which their help lists",
          "[options][errors]") {
  REQUIRE(cuda_graphs_conflicts().size() == 10);
  check_conflicts(cuda_graphs_conflicts(), {"--device", "cuda"}, {"--cuda-graphs"}, "--cuda-graphs");
  REQUIRE(accumulate_conflicts().size() == 3);
  check_conflicts(accumulate_conflicts(), {}, {"--accumulate", "4", "--ckpt-every", "8"}, "--accumulate 4");
  // A help that lists the table, not a copy of it: path length is among --accumulate's.
  CHECK(help_of("--accumulate").find("Not with --n-critic > 1, lazy R1, --pl-weight;") != std::string::npos);
}
