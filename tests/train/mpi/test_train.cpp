// The training loop at 2 ranks: every model runs and writes its outputs, and a resumed
// run reaches bitwise the parameters of an uninterrupted one.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>

#include "kernels/non_finite.h"
#include "models/data/dataset.h"
#include "models/data/dataset_identity.h"
#include "models/metrics/feature_net.h"
#include "models/train/batch_maker.h"
#include "models/train/fid_monitor.h"
#include "models/train/rank_stats.h"
#include "models/train/trainer.h"
#include "reducer/ddp.h"
#include "reducer/optim_wrapper.h"
#include "runtime/checkpoint.h"
#include "runtime/dist/process_group.h"
#include "tests/metrics/plant_feature_net.h"
#include "tests/mpi_world.h"
#include "tests/test_files.h"
#include "tests/training/json_reader.h"

using namespace tandem;
using tandem::testing::fashion_mnist_present;
using tandem::testing::read_bytes;
using tandem::testing::world;
using tandem::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

// A fresh directory shared by the ranks (rank 0 creates it).
std::string fresh_dir(const std::string& name) {
  return tandem::testing::shared_fresh_dir(*world(), "tandem-test-", name);
}

models::TrainOptions short_run(const std::string& model, const std::string& dir, int64_t iters) {
  models::TrainOptions o;
  o.model = model;
  o.data = model == "ring8-mlp" ? "ring8" : "fashion-mnist";
  o.iters = iters;
  o.batch = 8;
  o.log_every = 2;
  o.out = dir;
  o.seed = 5;
  return o;
}

// A 6-iteration mlp run in a fresh folder `tag` with FID at iterations 4 and 6 (300 samples)
// against an untrained network that rank 0 plants in a fresh cache under the name training
// would give: the run loads it (training it would take minutes and time the test out).
models::TrainOptions fid_run(const std::string& tag) {
  const std::string cache = fresh_dir(tag + "-cache");
  if (world()->rank() == 0) testing::plant_feature_net(cache);
  world()->barrier("feature network cached")->wait();
  models::TrainOptions o = short_run("mlp", fresh_dir(tag), 6);
  o.fid_every = 4;
  o.fid_samples = 300;
  o.fid_cache = cache;
  return o;
}

// The error every rank gives for rank 0's verdict on the --out `dir`.
std::string out_refusal(const std::string& dir, const std::string& reason) {
  return "--out " + dir + ": " + (world()->rank() == 0 ? "" : "rank 0 found: ") + reason;
}

// A Fashion-MNIST directory holding `count` blank training images (rank 0 writes it).
std::string tiny_fashion_mnist(int64_t count) {
  std::string dir = fresh_dir("tiny-fashion-mnist");
  if (world()->rank() == 0) {
    data::write_idx_u8(dir + "/train-images-idx3-ubyte.gz",
                       {{count, 28, 28}, std::vector<uint8_t>(static_cast<size_t>(count * 28 * 28), 0)});
    data::write_idx_u8(dir + "/train-labels-idx1-ubyte.gz",
                       {{count}, std::vector<uint8_t>(static_cast<size_t>(count), 0)});
  }
  world()->barrier("tiny dataset")->wait();
  return dir;
}

// Rank 0 rewrites one metadata entry of the checkpoint of `iteration` in `dir` (removes
// it when `value` is nullopt).
void relabel_checkpoint(const std::string& dir, int64_t iteration, const std::string& key,
                        const std::optional<std::string>& value) {
  if (world()->rank() == 0) {
    std::string path = checkpoint_path(dir, "ckpt", iteration);
    SafetensorsFile file = load_safetensors(path);
    if (value) {
      file.metadata[key] = *value;
    } else {
      file.metadata.erase(key);
    }
    save_safetensors(path, file.tensors, file.metadata);
  }
  world()->barrier("relabelled")->wait();
}

// Rank 0 cuts the checkpoint of `iteration` in `dir` to its first 100 bytes.
void truncate_checkpoint(const std::string& dir, int64_t iteration) {
  if (world()->rank() == 0) fs::resize_file(checkpoint_path(dir, "ckpt", iteration), 100);
  world()->barrier("truncated")->wait();
}

// `count` random images of 1x28x28 in [-1, 1], the same on every rank.
data::ImageDataset random_images(int64_t count) {
  data::ImageDataset d;
  d.images = Tensor::empty({count, 1, 28, 28});
  Generator gen(17);
  fill_uniform(d.images, -1.0, 1.0, gen);
  d.labels.assign(static_cast<size_t>(count), 0);
  return d;
}

// Rows of `parts` one after the other.
Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.size(0);
  Shape shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::empty(shape);
  int64_t at = 0;
  for (const Tensor& p : parts) {
    out.narrow_rows(at, p.size(0)).copy_(p);
    at += p.size(0);
  }
  return out;
}

// Trains tandem-train's model and wrapping for `options` `iters` iterations on `batch_of(i)`.
std::vector<Tensor> train_on(const models::TrainOptions& options, models::WrapMode wrap, bool prepare,
                             const std::shared_ptr<dist::ProcessGroup>& group, int64_t iters,
                             const std::function<Batch(int64_t)>& batch_of) {
  auto model = models::make_gan(models::gan_config(options));
  models::sync_batch_norms(options, *model, group);
  models::WrappedGanOptions wrapped_options = models::wrapped_gan_options(options);
  wrapped_options.wrap = wrap;
  wrapped_options.explicit_prepare = prepare;
  models::WrappedGan wrapped(model, group, wrapped_options);
  for (int64_t it = 0; it < iters; ++it) {
    model->set_iteration(it);
    wrapped.train_step(batch_of(it));
  }
  std::vector<Tensor> out;
  for (const Variable& p : model->parameters()) out.push_back(p.data().clone());
  return out;
}

// got == expected within relative 1e-5, but for Adam's amplified rounding noise: where the
// critic's gradient cancels to 0 (a unit whose slopes sum to the same on real and fake
// samples under the linear WGAN loss), the summation order decides the rounding noise that
// remains, and Adam moves by up to lr whatever the gradient's size. So at most 1 element in
// 10 000 may differ by more, and none by more than 2 lr. A wrong gradient moves most
// elements by several lr (a penalty on the whole batch's gradient norm instead of each
// sample's: 73% of the elements).
void require_same_but_adam_noise(const std::vector<Tensor>& got, const std::vector<Tensor>& expected,
                                 double lr) {
  REQUIRE(got.size() == expected.size());
  size_t elements = 0, beyond = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    auto g = got[i].to_vector(), e = expected[i].to_vector();
    REQUIRE(g.size() == e.size());
    elements += g.size();
    for (size_t k = 0; k < g.size(); ++k) {
      if (g[k] == Approx(e[k]).epsilon(1e-5).margin(1e-6)) continue;
      ++beyond;
      INFO("parameter " << i << " element " << k);
      REQUIRE(std::abs(g[k] - e[k]) <= 2 * lr);
    }
  }
  INFO(beyond << " of " << elements << " elements beyond relative 1e-5");
  CHECK(beyond * 10000 <= elements);
}

}  // namespace

TEST_CASE(
    "wgan-gp with 5 critic steps on N ranks ends with the parameters of one process on the global batch",
    "[train][penalty]") {
  // tandem-train's batches (BatchMaker: each rank its rows of the global batch's images,
  // noise and mixing coefficients) and its model and wrapping for --loss wgan-gp: 10 D steps,
  // 2 G steps. The oracle trains one process on every rank's batch at once. Whether a
  // critic unit's gradient cancels to 0 (require_same_but_adam_noise) depends on the draws:
  // with the global-batch noise, seeds 3, 4 and 8 of 1-11 have such a unit (thousands of
  // elements apart, within 2 lr), the others at most 8 elements; seed 1: 3.
  const models::TrainOptions o =
      models::parse_train_options({"--model", "mlp", "--loss", "wgan-gp", "--batch", "6", "--seed", "1"});
  REQUIRE(o.n_critic == 5);
  const data::ImageDataset images = random_images(48);
  const int size = world()->size();
  auto maker = [&](int rank) {
    return models::BatchMaker(
        {.seed = o.seed, .world_size = size, .rank = rank, .batch = o.batch, .noise_dim = 64}, images);
  };
  std::vector<models::BatchMaker> makers;
  for (int r = 0; r < size; ++r) makers.push_back(maker(r));
  auto global_batch = [&](int64_t it) {
    std::vector<Tensor> inputs, targets, aux;
    for (const models::BatchMaker& m : makers) {
      Batch b = m.make(it);
      inputs.push_back(b.inputs);
      targets.push_back(b.targets);
      aux.push_back(b.aux);
    }
    return Batch{concat_rows(inputs), concat_rows(targets), concat_rows(aux)};
  };
  const int64_t iters = 10;
  const std::vector<Tensor> reference =
      train_on(o, models::WrapMode::none, false, world(), iters, global_batch);
  {  // the penalty reaches the parameters: another lambda gives other parameters
    models::TrainOptions weaker = o;
    weaker.gp_lambda = 1.0;
    const std::vector<Tensor> other =
        train_on(weaker, models::WrapMode::none, false, world(), iters, global_batch);
    size_t moved = 0;
    for (size_t i = 0; i < other.size(); ++i) {
      auto a = other[i].to_vector(), b = reference[i].to_vector();
      for (size_t k = 0; k < a.size(); ++k) moved += std::abs(a[k] - b[k]) > o.lr;
    }
    CHECK(moved > 1000);
  }
  const models::BatchMaker& mine = makers[static_cast<size_t>(world()->rank())];
  for (auto [wrap, prepare] :
       {std::pair{models::WrapMode::whole, false}, std::pair{models::WrapMode::separate, false},
        std::pair{models::WrapMode::whole, true}}) {
    INFO(models::wrap_mode_name(wrap)
         << (prepare ? " + explicit prepare" : "") << " wrap, " << size << " ranks");
    std::vector<Tensor> got =
        train_on(o, wrap, prepare, world(), iters, [&](int64_t it) { return mine.make(it); });
    require_same_but_adam_noise(got, reference, o.lr);
  }
}

TEST_CASE(
    "dcgan and dcgan64 with --sync-bn on N ranks end with the parameters of one process on the global "
    "batch",
    "[train][sync_bn]") {
  // dcgan's G has two batch norms, dcgan64's G four and D three: with --sync-bn they see the
  // global batch, so the ranks, each on tandem-train's batch of its own, train as one
  // process on every rank's batch. dcgan64 at width 8 (its 28x28 data enlarged to 64x64).
  for (const std::vector<std::string>& model :
       {std::vector<std::string>{"--model", "dcgan"},
        std::vector<std::string>{"--model", "dcgan64", "--width", "8"}}) {
    std::vector<std::string> args = model;
    for (const char* a : {"--batch", "4", "--seed", "3", "--sync-bn"}) args.push_back(a);
    const models::TrainOptions o = models::parse_train_options(args);
    INFO(o.model);
    REQUIRE(o.sync_bn);
    const data::ImageDataset images = random_images(32);
    const int size = world()->size();
    const std::shared_ptr<models::GanModel> probe = models::make_gan(models::gan_config(o));
    std::vector<models::BatchMaker> makers;
    for (int r = 0; r < size; ++r) {
      makers.push_back(models::BatchMaker({.seed = o.seed,
                                           .world_size = size,
                                           .rank = r,
                                           .batch = o.batch,
                                           .noise_dim = probe->noise_dim(),
                                           .side = probe->data_shape()[1]},
                                          images));
    }
    auto global_batch = [&](int64_t it) {
      std::vector<Tensor> inputs, targets, aux;
      for (const models::BatchMaker& m : makers) {
        Batch b = m.make(it);
        inputs.push_back(b.inputs);
        targets.push_back(b.targets);
        if (b.aux.defined()) aux.push_back(b.aux);
      }
      return Batch{concat_rows(inputs), concat_rows(targets), aux.empty() ? Tensor() : concat_rows(aux)};
    };
    // dcgan64's critic has batch norm: at initialisation D's outputs are nearly equal over
    // the batch, so the gradient reaching G through D's batch norms (g - mean(g) - ...) is
    // a small remainder of large equal terms, and from the third step on the rounding of
    // a mean summed over 2 ranks instead of one batch shows in 10% of G's elements (by
    // < lr; 1 rank matches). Two steps still see every batch norm's statistics and
    // gradients at work: without D's batch norms synchronised they fail.
    const int64_t iters = o.model == "dcgan64" ? 2 : 3;
    models::TrainOptions oracle_options = o;
    oracle_options.sync_bn = false;  // one process on the global batch: plain BatchNorm
    const std::vector<Tensor> reference =
        train_on(oracle_options, models::WrapMode::none, false, world(), iters, global_batch);
    const models::BatchMaker& mine = makers[static_cast<size_t>(world()->rank())];
    for (models::WrapMode wrap : {models::WrapMode::whole, models::WrapMode::separate}) {
      INFO(models::wrap_mode_name(wrap) << " wrap, " << size << " ranks");
      std::vector<Tensor> got =
          train_on(o, wrap, false, world(), iters, [&](int64_t it) { return mine.make(it); });
      require_same_but_adam_noise(got, reference, o.lr);
    }
  }
}

namespace {

// An optimizer that keeps the gradients its step() is given (the averaged, unscaled ones)
// and leaves the parameters as they are.
class GradientRecorder final : public optim::Optimizer {
 public:
  explicit GradientRecorder(std::vector<Variable> params) : Optimizer(std::move(params), 1.0, "recorder") {}
  void step() override {
    for (const Variable& p : params()) seen.push_back(p.grad().clone());
  }
  std::vector<Tensor> seen;
};

// One train_step of tandem-train's model for `o` (whole wrap on N ranks, or one process when
// `one_process`) on `batch`, with optimizers that record each part's gradients: D's, then G's.
std::vector<Tensor> step_gradients(const models::TrainOptions& o, bool one_process, const Batch& batch) {
  auto model = models::make_gan(models::gan_config(o));
  if (!one_process) models::sync_batch_norms(o, *model, world());
  auto record_g = std::make_shared<GradientRecorder>(model->generator->parameters());
  auto record_d = std::make_shared<GradientRecorder>(model->discriminator->parameters());
  OptimWrapperDict wrappers;
  wrappers.add("generator", std::make_shared<OptimWrapper>(record_g));
  wrappers.add("discriminator", std::make_shared<OptimWrapper>(record_d));
  if (o.precision == DType::f16) {
    for (const char* part : {"generator", "discriminator"})
      wrappers[part].set_loss_scaler(std::make_shared<optim::LossScaler>());
  }
  model->set_iteration(0);
  if (one_process) {
    model->train_step(batch, wrappers);
  } else {
    DistributedDataParallel ddp(model, world(), models::wrapped_gan_options(o).ddp);
    ddp.train_step(batch, wrappers);
  }
  std::vector<Tensor> out = record_d->seen;
  out.insert(out.end(), record_g->seen.begin(), record_g->seen.end());
  return out;
}

}  // namespace

TEST_CASE("dcgan in bf16 and fp16: N ranks average one process's gradients within the rounding",
          "[train][precision]") {
  // --precision bf16 / fp16: every GEMM and convolution reads rounded operands and
  // accumulates in float32. The oracle is one process, in the same precision, on every
  // rank's batch at once (--sync-bn makes G's batch norms see the global batch on N ranks
  // too). What differs is float32 sums taken in another order (the Reducer's average, a
  // batch's sum, oneDNN's blocking for another batch size), about 1e-7 of a value, and what
  // that does downstream: a value that lands on the other side of a 16-bit rounding boundary
  // moves by one 16-bit step (2^-8 of itself in bf16, 2^-11 in fp16) where an op reads it.
  // Measured (2 and 3 ranks): at most 2.6 such steps of a gradient's largest element,
  // after the cancellation in its sums; the bound is 8. The precision itself moves the
  // gradients 10-30 times further (fp32 against the same oracle): at least 4 times the
  // N-rank difference and 8 steps, or the test could not tell the two apart.
  for (const char* precision : {"bf16", "fp16"}) {
    const models::TrainOptions o = models::parse_train_options(
        {"--model", "dcgan", "--batch", "4", "--seed", "3", "--sync-bn", "--precision", precision});
    INFO(precision);
    const double step = o.precision == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const data::ImageDataset images = random_images(32);
    const int size = world()->size();
    std::vector<Tensor> inputs, targets;
    Batch mine;
    for (int r = 0; r < size; ++r) {
      Batch b =
          models::BatchMaker(
              {.seed = o.seed, .world_size = size, .rank = r, .batch = o.batch, .noise_dim = 64}, images)
              .make(0);
      inputs.push_back(b.inputs);
      targets.push_back(b.targets);
      if (r == world()->rank()) mine = b;
    }
    const Batch global{concat_rows(inputs), concat_rows(targets), Tensor()};
    models::TrainOptions one = o;
    one.sync_bn = false;  // one process on the global batch: plain BatchNorm
    const std::vector<Tensor> want = step_gradients(one, true, global);
    const std::vector<Tensor> got = step_gradients(o, false, mine);
    models::TrainOptions fp32 = one;
    fp32.precision = DType::f32;
    const std::vector<Tensor> full = step_gradients(fp32, true, global);
    REQUIRE(got.size() == want.size());
    REQUIRE(full.size() == want.size());
    double worst = 0, worst_fp32 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const auto g = got[i].to_vector(), w = want[i].to_vector(), f = full[i].to_vector();
      double scale = 0, diff = 0, from_fp32 = 0;
      for (size_t k = 0; k < g.size(); ++k) {
        scale = std::max(scale, std::abs(w[k]));
        diff = std::max(diff, std::abs(g[k] - w[k]));
        from_fp32 = std::max(from_fp32, std::abs(f[k] - w[k]));
      }
      INFO("gradient " << i << ": N ranks off by " << diff << ", fp32 by " << from_fp32 << ", largest "
                       << scale);
      CHECK(diff <= 8 * step * scale);
      worst = std::max(worst, diff / scale);
      worst_fp32 = std::max(worst_fp32, from_fp32 / scale);
    }
    INFO("worst: N ranks " << worst << ", fp32 " << worst_fp32 << " of the largest element");
    CHECK(worst_fp32 > 8 * step);
    CHECK(worst_fp32 > 4 * worst);
  }
}

TEST_CASE("dcgan in bf16 and fp16 on N ranks keeps the replicas bitwise equal", "[train][precision]") {
  for (const char* precision : {"bf16", "fp16"}) {
    const models::TrainOptions o = models::parse_train_options(
        {"--model", "dcgan", "--batch", "4", "--seed", "3", "--sync-bn", "--precision", precision});
    INFO(precision);
    const data::ImageDataset images = random_images(32);
    const models::BatchMaker mine({.seed = o.seed,
                                   .world_size = world()->size(),
                                   .rank = world()->rank(),
                                   .batch = o.batch,
                                   .noise_dim = 64},
                                  images);
    for (models::WrapMode wrap : {models::WrapMode::whole, models::WrapMode::separate}) {
      const std::vector<Tensor> params =
          train_on(o, wrap, false, world(), 3, [&](int64_t it) { return mine.make(it); });
      for (const Tensor& p : params) {
        Tensor rank0 = p.clone();
        world()->broadcast(rank0, 0, "rank 0's weights")->wait();
        CHECK(kernels::all_finite(p));
        CHECK(std::memcmp(p.raw_data(), rank0.raw_data(), p.bytes()) == 0);
      }
    }
  }
}

TEST_CASE("one collective gathers the losses averaged over the ranks and every rank's memory",
          "[train][stats]") {
  const int rank = world()->rank(), size = world()->size();
  // Rank r reports losses r + 1 and 2 (r + 1): the averages are (n + 1) / 2 and n + 1.
  // And named terms 3 (r + 1) and -(r + 1): averages 3 (n + 1) / 2 and -(n + 1) / 2.
  models::RankStats stats = models::gather_rank_stats(*world(), rank + 1.0, 2.0 * (rank + 1),
                                                      {{"gp", 3.0 * (rank + 1)}, {"wdist", -(rank + 1.0)}});
  CHECK(stats.loss_d == Approx((size + 1) / 2.0));
  CHECK(stats.loss_g == Approx(size + 1.0));
  REQUIRE(stats.terms.size() == 2);
  CHECK(stats.terms[0].first == "gp");
  CHECK(stats.terms[0].second == Approx(3.0 * (size + 1) / 2.0));
  CHECK(stats.terms[1].first == "wdist");
  CHECK(stats.terms[1].second == Approx(-(size + 1) / 2.0));
  REQUIRE(stats.rss_mb.size() == static_cast<size_t>(size));
  CHECK(stats.rss_mb[static_cast<size_t>(rank)] == Approx(models::resident_mb()).margin(2.0));
  for (double mb : stats.rss_mb) CHECK(mb > 1.0);  // every slot filled by its rank
}

TEST_CASE("fp16: the loss scales' skips and back-offs resume bitwise from the checkpoint",
          "[train][resume][precision]") {
  // A loss scale of 2^40 overflows float16 at first: each part skips steps and halves its
  // scale until the gradients fit. The checkpoint of iteration 10 holds both scalers; a run
  // resumed from it ends bitwise where one without a stop does.
  auto fp16_run = [](const std::string& dir, int64_t iters) {
    models::TrainOptions o = short_run("ring8-mlp", dir, iters);
    o.precision = DType::f16;
    o.loss_scale_init = std::ldexp(1.0, 40);
    return o;
  };
  std::ostringstream log;
  auto straight = models::train(fp16_run(fresh_dir("fp16-straight"), 20), world(), log);
  const std::string dir = fresh_dir("fp16-resumed");
  models::train(fp16_run(dir, 10), world(), log);
  {
    const SafetensorsFile file = load_safetensors(checkpoint_path(dir, "ckpt", 10));
    for (const char* part : {"generator", "discriminator"}) {
      INFO(part);
      const std::string prefix = std::string("scaler.") + part + ".";
      REQUIRE(file.tensors.count(prefix + "0") == 1);
      const double scale = file.tensors.at(prefix + "0").to_vector()[0];
      const double skipped = file.tensors.at(prefix + "2").to_vector()[0];
      CHECK(skipped >= 1);
      CHECK(scale == std::ldexp(1.0, 40 - static_cast<int>(skipped)));  // halved at each skip, no growth yet
    }
    CHECK(file.metadata.at("precision") == "fp16");
  }
  auto o = fp16_run(dir, 20);
  o.resume = true;
  auto second = models::train(o, world(), log);
  CHECK(second.start_iteration == 10);
  REQUIRE(second.parameters.size() == straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(std::memcmp(second.parameters[i].raw_data(), straight.parameters[i].raw_data(),
                        straight.parameters[i].bytes()) == 0);
  }
  // The log says what the scales did: skipped_g and skipped_d at the last log point.
  testing::JsonValue last;
  std::ifstream metrics(dir + "/metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"loss_d\"") != std::string::npos) last = testing::JsonReader::parse(line);  // not ring8's
  }
  CHECK(last.at("skipped_g").number >= 1);
  CHECK(last.at("skipped_d").number >= 1);
  CHECK(last.at("scale_d").number < std::ldexp(1.0, 40));
  // The first line says what the precision runs on (kernels/reduced_precision.h).
  if (world()->rank() == 0)
    CHECK(log.str().find(", fp16 in every layer on float32 kernels on widened operands") !=
          std::string::npos);
}

TEST_CASE("fp16: G's average holds while its steps are skipped", "[train][precision]") {
  // A loss scale of 1e30 overflows float16 at every step of a short run: G never moves, and
  // its average, which would take d * a + (1 - d) * a (not always a, in float32) at each
  // update, must not move either.
  models::TrainOptions o = short_run("ring8-mlp", fresh_dir("fp16-ema"), 5);
  o.precision = DType::f16;
  o.loss_scale_init = 1e30;
  std::ostringstream log;
  models::train(o, world(), log);
  const SafetensorsFile file = load_safetensors(checkpoint_path(o.out, "ckpt", 5));
  CHECK(file.tensors.at("scaler.generator.2").to_vector()[0] == 5);  // every G step skipped
  const auto initial = models::make_gan(models::gan_config(o))->generator->parameters();
  for (size_t i = 0; i < initial.size(); ++i) {
    INFO("G parameter " << i);
    const Tensor& average = file.tensors.at("ema." + std::to_string(i));
    REQUIRE(average.bytes() == initial[i].data().bytes());
    CHECK(std::memcmp(average.raw_data(), initial[i].data().raw_data(), average.bytes()) == 0);
  }
}

TEST_CASE("20 iterations straight equal 10 + resume + 10, bitwise", "[train][resume]") {
  std::ostringstream log;
  auto straight = models::train(short_run("ring8-mlp", fresh_dir("straight"), 20), world(), log);
  std::string dir = fresh_dir("resumed");
  auto first = models::train(short_run("ring8-mlp", dir, 10), world(), log);
  CHECK(first.iterations == 10);
  auto o = short_run("ring8-mlp", dir, 20);
  o.resume = true;
  auto second = models::train(o, world(), log);
  CHECK(second.start_iteration == 10);
  CHECK(second.iterations == 10);
  REQUIRE(second.parameters.size() == straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(std::memcmp(second.parameters[i].raw_data(), straight.parameters[i].raw_data(),
                        straight.parameters[i].bytes()) == 0);
  }
}

TEST_CASE(
    "wgan-gp with lazy R1 resumed in the middle of a group of critic steps equals a straight run, bitwise",
    "[train][resume][penalty]") {
  // 5 critic steps per G step and R1 every 4th D step: the resume at iteration 7 is inside
  // both cycles, which depend on the iteration alone.
  auto penalised = [](const std::string& dir, int64_t iters) {
    auto o = short_run("ring8-mlp", dir, iters);
    o.loss = models::GanLoss::wgan_gp;
    o.n_critic = 5;
    o.lr = 1e-4;
    o.r1_gamma = 1.0;
    o.r1_every = 4;
    return o;
  };
  std::ostringstream log;
  auto straight = models::train(penalised(fresh_dir("wgan-straight"), 12), world(), log);
  std::string dir = fresh_dir("wgan-resumed");
  models::train(penalised(dir, 7), world(), log);
  auto o = penalised(dir, 12);
  o.resume = true;
  auto second = models::train(o, world(), log);
  CHECK(second.start_iteration == 7);
  REQUIRE(second.parameters.size() == straight.parameters.size());
  for (size_t i = 0; i < straight.parameters.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(std::memcmp(second.parameters[i].raw_data(), straight.parameters[i].raw_data(),
                        straight.parameters[i].bytes()) == 0);
  }
}

TEST_CASE("a moving average by a half-life in images, ramped up, resumes bitwise", "[train][resume][ema]") {
  // Its decay follows from the iteration and the global batch: the resumed run's last
  // checkpoint holds the straight run's average to the bit.
  auto half_life = [](const std::string& dir, int64_t iters) {
    auto o = short_run("ring8-mlp", dir, iters);
    o.ema_kimg = 0.05;
    o.ema_rampup = 0.5;
    return o;
  };
  std::ostringstream log;
  const std::string straight_dir = fresh_dir("ema-straight"), dir = fresh_dir("ema-resumed");
  models::train(half_life(straight_dir, 20), world(), log);
  models::train(half_life(dir, 10), world(), log);
  auto o = half_life(dir, 20);
  o.resume = true;
  CHECK(models::train(o, world(), log).start_iteration == 10);
  // The same training with --ema-decay's ramp: the same weights, another average.
  const std::string decay_dir = fresh_dir("ema-decay");
  models::train(short_run("ring8-mlp", decay_dir, 20), world(), log);
  world()->barrier("ema files")->wait();
  const SafetensorsFile straight = load_safetensors(straight_dir + "/ckpt-000020.safetensors");
  const SafetensorsFile resumed = load_safetensors(dir + "/ckpt-000020.safetensors");
  const SafetensorsFile by_decay = load_safetensors(decay_dir + "/ckpt-000020.safetensors");
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.bytes() == b.bytes() && std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0;
  };
  int averages = 0, differ_from_decay = 0;
  for (const auto& [name, tensor] : straight.tensors) {
    INFO(name);
    const bool average = name.rfind("ema.", 0) == 0;
    CHECK(same(resumed.tensors.at(name), tensor));
    if (name.rfind("model.", 0) == 0) CHECK(same(by_decay.tensors.at(name), tensor));
    averages += average;
    differ_from_decay += average && !same(by_decay.tensors.at(name), tensor);
  }
  CHECK(averages > 0);
  CHECK(differ_from_decay == averages);
}

TEST_CASE("--on-nonfinite scrub: a NaN in one rank's real data is scrubbed from D's averages, counted as D's",
          "[train][scrub]") {
  // The NaN reaches D's gradients (the D step), never G's (its loss sees only fakes).
  auto o = short_run("ring8-mlp", "unused", 3);
  o.on_nonfinite = models::OnNonFinite::scrub;
  for (models::WrapMode wrap : {models::WrapMode::whole, models::WrapMode::separate}) {
    INFO(models::wrap_mode_name(wrap));
    auto model = models::make_gan(models::gan_config(o));
    models::WrappedGanOptions wrapped_options = models::wrapped_gan_options(o);
    wrapped_options.wrap = wrap;
    models::WrappedGan wrapped(model, world(), wrapped_options);
    Generator gen(3);
    for (int64_t it = 0; it < 3; ++it) {
      Batch batch{Tensor::empty({8, 2}), Tensor::empty({8, model->noise_dim()})};
      fill_normal(batch.inputs, 0.0, 1.0, gen);
      fill_normal(batch.targets, 0.0, 1.0, gen);
      if (it == 1 && world()->rank() == world()->size() - 1)
        batch.inputs.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
      model->set_iteration(it);
      wrapped.train_step(batch);
      const models::WrappedGan::Scrubbed scrubbed = wrapped.scrubbed_elements();
      CHECK(scrubbed.generator == 0);
      if (it == 0) CHECK(scrubbed.discriminator == 0);
      if (it >= 1) CHECK(scrubbed.discriminator > 0);
    }
    CHECK(wrapped.skipped_steps() == 0);
    // Every rank holds the same finite weights: the scrub ran on the same averages everywhere.
    for (const Variable& p : model->parameters()) {
      Tensor mine = p.data().clone(), rank0 = p.data().clone();
      world()->broadcast(rank0, 0, "rank 0's weights")->wait();
      for (double x : mine.to_vector()) REQUIRE(std::isfinite(x));
      CHECK(std::memcmp(mine.raw_data(), rank0.raw_data(), mine.bytes()) == 0);
    }
  }
}

TEST_CASE("resumed from an earlier checkpoint, metrics.jsonl holds each iteration once", "[train][resume]") {
  // 20 iterations logged every 2; the checkpoint of iteration 20 is lost (as a crash before
  // it leaves things), so the resume from 10 logs 12..20 again. A torn line ends the file.
  std::string dir = fresh_dir("metrics-resumed");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 20);
  o.ckpt_every = 10;
  models::train(o, world(), log);
  if (world()->rank() == 0) {
    fs::remove(checkpoint_path(dir, "ckpt", 20));
    std::ofstream(dir + "/metrics.jsonl", std::ios::app) << "{\"iteration\": 22, \"loss";
  }
  world()->barrier("checkpoint 20 removed")->wait();
  o.resume = true;
  CHECK(models::train(o, world(), log).start_iteration == 10);
  if (world()->rank() == 0) {
    std::ifstream in(dir + "/metrics.jsonl");
    std::vector<int64_t> iterations, ring8_summaries;  // the summary: once, at the end
    for (std::string line; std::getline(in, line);) {
      INFO(line);
      testing::JsonValue v = testing::JsonReader::parse(line);
      auto& list = v.members.count("ring8_modes") ? ring8_summaries : iterations;
      list.push_back(static_cast<int64_t>(v.at("iteration").number));
    }
    CHECK(iterations == std::vector<int64_t>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20});
    CHECK(ring8_summaries == std::vector<int64_t>{20});
  }
}

TEST_CASE("dcgan with --sync-bn trains and rank 0 draws its picture alone", "[train][sync_bn]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  // Rank 0 draws the samples while the others wait at the end: G's SyncBatchNorms must not
  // wait for them there. A short deadline turns such a wait into an error, not a long stall.
  const auto timeout = world()->timeout();
  world()->set_timeout(std::chrono::seconds(10));
  std::string dir = fresh_dir("dcgan-sync-bn");
  std::ostringstream log;
  auto o = short_run("dcgan", dir, 2);
  o.sync_bn = true;
  o.check_replicas_every = 1;
  auto result = models::train(o, world(), log);
  world()->set_timeout(timeout);
  CHECK(result.iterations == 2);
  if (world()->rank() == 0) {
    CHECK(log.str().find("2 batch norm(s) synchronised over the ranks (--sync-bn)") != std::string::npos);
    CHECK(log.str().find("no sample picture") == std::string::npos);
    CHECK(fs::exists(fs::path(dir) / "samples-000002.png"));
  }
}

TEST_CASE("every model trains a few iterations and writes metrics, a picture and a checkpoint", "[train]") {
  for (std::string model : {"ring8-mlp", "mlp", "dcgan", "pggan"}) {
    if (model != "ring8-mlp" && !fashion_mnist_present()) {
      WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping " << model);
      continue;
    }
    INFO(model);
    std::string dir = fresh_dir(model);
    std::ostringstream log;
    auto o = short_run(model, dir, model == "pggan" ? 10 : 3);
    o.pggan_stage_iters = 4;  // stage 0, stage 1 fading in then stable, stage 2 within 10 iterations
    o.log_every = 1;
    o.check_replicas_every = 1;  // parameters every step; batch norm's statistics after their broadcast
    auto result = models::train(o, world(), log);
    CHECK(result.iterations == o.iters);
    if (world()->rank() == 0) {
      CHECK(fs::file_size(fs::path(dir) / "metrics.jsonl") > 0);
      std::ostringstream png;
      png << "samples-" << std::setw(6) << std::setfill('0') << o.iters << ".png";
      CHECK(fs::exists(fs::path(dir) / png.str()));
      CHECK(fs::exists(fs::path(dir) / ("ckpt-" + png.str().substr(8, 6) + ".safetensors")));
      if (model == "pggan") {
        CHECK(log.str().find("stage 1 (14x14), fade-in") != std::string::npos);
        CHECK(log.str().find("stage 2 (28x28)") != std::string::npos);
      }
    }
  }
}

TEST_CASE("resume refuses a checkpoint of another model, naming it", "[train][errors]") {
  std::string dir = fresh_dir("other-model");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  if (!fashion_mnist_present()) return;
  auto o = short_run("mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains("checkpoint of model 'ring8-mlp', but this run trains 'mlp'"));
}

TEST_CASE("a checkpoint whose tensors do not fit the model names the first mismatching parameter",
          "[train][errors]") {
  if (!fashion_mnist_present()) return;
  std::string dir = fresh_dir("relabelled");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  // Relabel the ring8 checkpoint as an mlp one without a record of its data (as written
  // before data was recorded): the metadata checks pass, the tensors do not fit.
  relabel_checkpoint(dir, 2, "model", "mlp");
  relabel_checkpoint(dir, 2, "data", std::nullopt);
  auto o = short_run("mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains("does not fit this model") && Catch::Contains("'generator.0.weight'") &&
                        Catch::Contains("[128, 16]") && Catch::Contains("[256, 64]"));
}

TEST_CASE("resume refuses a checkpoint written at another world size, naming both sizes", "[train][errors]") {
  std::string dir = fresh_dir("other-world-size");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  const std::string ranks = std::to_string(world()->size()), saved = std::to_string(world()->size() + 1);
  relabel_checkpoint(dir, 2, "world_size", saved);
  auto o = short_run("ring8-mlp", dir, 4);
  o.resume = true;
  CHECK_THROWS_WITH(
      models::train(o, world(), log),
      Catch::Contains("written by a run of " + saved + " ranks; resuming on " + ranks + " ranks") &&
          Catch::Contains("Resume with mpirun -np " + saved));
}

TEST_CASE("resume refuses, on every rank, when no checkpoint can be read; --resume-allow-fresh starts anew",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("unreadable");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 2), world(), log);
  truncate_checkpoint(dir, 2);
  const std::string file = checkpoint_path(dir, "ckpt", 2);
  auto o = short_run("ring8-mlp", dir, 4);
  o.resume = true;
  const std::string refusal = "--resume: no checkpoint in " + dir + " can be read (" + file + ": truncated";
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains((world()->rank() == 0 ? "" : "rank 0 cannot resume: ") + refusal) &&
                        Catch::Contains("or pass --resume-allow-fresh to start from iteration 0"));
  CHECK(fs::file_size(file) == 100);  // untouched

  o.resume_allow_fresh = true;
  auto fresh = models::train(o, world(), log);
  CHECK(fresh.start_iteration == 0);
  CHECK(fresh.iterations == 4);
  CHECK(fs::file_size(file) == 100);  // still there, for whoever wants it
}

TEST_CASE("a new run in an --out holding checkpoints is refused, naming --resume and --overwrite",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("reused-out");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 2);
  o.ckpt_every = 1;
  models::train(o, world(), log);
  const std::string file = checkpoint_path(dir, "ckpt", 2);
  const auto first_size = fs::file_size(dir + "/metrics.jsonl");
  o.iters = 1;  // a shorter second run would leave the first run's newer checkpoint behind
  const std::string reason =
      "holds checkpoints of an earlier run (ckpt-000001.safetensors, ckpt-000002.safetensors). Pass --resume "
      "to "
      "continue that run, --overwrite to replace it, or choose another --out";
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains(out_refusal(dir, reason)));
  CHECK(fs::exists(file));  // nothing lost
  CHECK(fs::file_size(dir + "/metrics.jsonl") == first_size);
  world()->barrier("refusal checked")->wait();  // before rank 0's --overwrite removes the file

  // --overwrite: the earlier run's checkpoints go, this run's alone are left.
  o.overwrite = true;
  std::ostringstream overwrite_log;
  auto replaced = models::train(o, world(), overwrite_log);
  CHECK(replaced.iterations == 1);
  CHECK_FALSE(fs::exists(file));
  CHECK(fs::exists(checkpoint_path(dir, "ckpt", 1)));
  if (world()->rank() == 0)
    CHECK_THAT(overwrite_log.str(),
               Catch::Contains("--overwrite: removed the earlier run's 2 checkpoint(s)"));
}

TEST_CASE("a new run in an --out holding an earlier run's outputs but no checkpoint is refused too",
          "[train][errors][resume]") {
  // A run killed before its first checkpoint left its metrics, report and a sample picture.
  std::string dir = fresh_dir("killed-early");
  if (world()->rank() == 0) {
    std::ofstream(dir + "/metrics.jsonl") << "{\"iteration\": 2, \"loss_d\": 1.0}\n";
    std::ofstream(dir + "/report.html") << "<html></html>\n";
    std::ofstream(dir + "/samples-000999.png") << "png";
  }
  world()->barrier("outputs written")->wait();
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 2);
  const std::string reason =
      "holds the outputs of an earlier run, without checkpoints (metrics.jsonl, report.html, "
      "samples-000999.png). Pass --resume to continue that run, --overwrite to replace it, or choose another "
      "--out";
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains(out_refusal(dir, reason)));
  CHECK(fs::file_size(dir + "/metrics.jsonl") == 32);  // nothing lost
  CHECK(fs::exists(dir + "/report.html"));

  // --overwrite replaces them.
  o.overwrite = true;
  CHECK(models::train(o, world(), log).iterations == 2);
  CHECK_FALSE(fs::exists(dir + "/samples-000999.png"));

  // An empty metrics log (a run that ended before its first line) holds nothing to lose.
  std::string empty = fresh_dir("ended-early");
  if (world()->rank() == 0) std::ofstream(empty + "/metrics.jsonl").flush();
  world()->barrier("empty log written")->wait();
  CHECK(models::train(short_run("ring8-mlp", empty, 2), world(), log).iterations == 2);
}

TEST_CASE("--resume in an --out without checkpoints is refused naming the path, unless --resume-allow-fresh",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("resume-empty");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir + "/typo", 2);
  o.resume = true;
  const std::string refusal = "--resume: no checkpoint in " + o.out +
                              " (no ckpt-*.safetensors file there). Check the --out path, or pass "
                              "--resume-allow-fresh to start from iteration 0";
  CHECK_THROWS_WITH(models::train(o, world(), log),
                    Catch::Contains((world()->rank() == 0 ? "" : "rank 0 cannot resume: ") + refusal));
  CHECK_FALSE(fs::exists(checkpoint_path(o.out, "ckpt", 2)));  // nothing trained
  o.resume_allow_fresh = true;
  auto fresh = models::train(o, world(), log);
  CHECK(fresh.start_iteration == 0);
  CHECK(fresh.iterations == 2);
}

// Damages checkpoint `iteration` on rank 0: its header (cut to 100 bytes) or one data byte.
void damage_checkpoint(const std::string& dir, int64_t iteration, bool header) {
  if (header) return truncate_checkpoint(dir, iteration);
  if (world()->rank() == 0) {
    const std::string path = checkpoint_path(dir, "ckpt", iteration);
    std::string bytes = read_bytes(path);
    bytes.back() = static_cast<char>(bytes.back() ^ 0x01);  // the data section ends the file
    write_bytes(path, bytes);
  }
  world()->barrier("damaged")->wait();
}

TEST_CASE(
    "a damaged newest checkpoint (header or data) stops the resume naming it, unless "
    "--resume-skip-damaged, which resumes from the one before",
    "[train][resume]") {
  for (bool header : {true, false}) {
    INFO((header ? "header" : "data") << " damage");
    std::string dir = fresh_dir(header ? "torn-newest" : "flipped-newest");
    std::ostringstream log;
    auto o = short_run("ring8-mlp", dir, 4);
    o.ckpt_every = 2;
    models::train(o, world(), log);
    damage_checkpoint(dir, 4, header);
    const std::string newest = checkpoint_path(dir, "ckpt", 4), older = checkpoint_path(dir, "ckpt", 2);
    o.iters = 6;
    o.resume = true;
    const std::string refusal = "--resume: " + newest + (header ? ": truncated" : ": checksum mismatch");
    const std::string way_on =
        ". It is newer than " + older +
        ", the newest checkpoint that can be read. Repair or move the damaged file away, "
        "or pass --resume-skip-damaged to resume from " +
        older;
    CHECK_THROWS_WITH(models::train(o, world(), log),
                      Catch::Contains((world()->rank() == 0 ? "" : "rank 0 cannot resume: ") + refusal) &&
                          Catch::Contains(way_on));
    CHECK_FALSE(fs::exists(checkpoint_path(dir, "ckpt", 6)));  // nothing trained
    o.resume_skip_damaged = true;
    auto resumed = models::train(o, world(), log);  // rank 0's warning naming the file goes to stderr
    CHECK(resumed.start_iteration == 2);
    CHECK(resumed.iterations == 4);
  }
}

TEST_CASE("a newest checkpoint that cannot be loaded is an error naming it and the one before",
          "[train][errors][resume]") {
  std::string dir = fresh_dir("unloadable");
  std::ostringstream log;
  auto o = short_run("ring8-mlp", dir, 4);
  o.ckpt_every = 2;
  models::train(o, world(), log);
  relabel_checkpoint(dir, 4, "iteration", "four");  // the header is fine, the content is not
  const std::string newest = checkpoint_path(dir, "ckpt", 4), older = checkpoint_path(dir, "ckpt", 2);
  o.iters = 6;
  o.resume = true;
  if (world()->rank() == 0) {
    CHECK_THROWS_WITH(models::train(o, world(), log),
                      Catch::Contains("--resume: " + newest + ": metadata 'iteration' is 'four'") &&
                          Catch::Contains(". If " + newest + " is damaged, move it out of " + dir +
                                          " to resume from the checkpoint before it, " + older));
  } else {
    CHECK_THROWS_WITH(
        models::train(o, world(), log),
        Catch::Contains("--resume: rank 0 resumes from " + newest + ", which this rank cannot load"));
  }
}

TEST_CASE("resume refuses a checkpoint beyond --iters", "[train][errors][resume]") {
  std::string dir = fresh_dir("beyond");
  std::ostringstream log;
  models::train(short_run("ring8-mlp", dir, 4), world(), log);
  auto o = short_run("ring8-mlp", dir, 2);
  o.resume = true;
  CHECK_THROWS_WITH(
      models::train(o, world(), log),
      Catch::Contains("--resume: " + checkpoint_path(dir, "ckpt", 4) +
                      " is at iteration 4, beyond --iters 2; pass --iters 4 or more to continue that run"));
}

TEST_CASE("a batch larger than each rank's shard of the data stops every rank, naming both",
          "[train][errors]") {
  const int64_t samples = 10, ranks = world()->size(), shard = samples / ranks, batch = shard + 1;
  auto o = short_run("mlp", fresh_dir("small-data"), 2);
  o.data_dir = tiny_fashion_mnist(samples);
  o.batch = batch;
  std::ostringstream log, expected;
  expected << "--data fashion-mnist from --data-dir " << o.data_dir << " cannot feed --batch " << batch
           << " on " << ranks << " rank(s): DistributedSampler: batch " << batch
           << " per rank needs at least " << batch * ranks << " samples for " << ranks
           << " ranks; the dataset has " << samples << ", a shard of " << shard
           << " per rank. Lower --batch or start fewer ranks (mpirun -np)";
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains(expected.str()));
  CHECK(log.str().empty());  // before training
}

TEST_CASE("an --out that cannot be created stops every rank before training, naming it", "[train][errors]") {
  // A path under a regular file: no directory can be made there, even by root.
  const std::string file = fresh_dir("out-under-file") + "/regular-file";
  if (world()->rank() == 0) std::ofstream(file) << "not a directory";
  world()->barrier("regular file")->wait();
  auto o = short_run("ring8-mlp", file + "/run", 2);
  std::ostringstream log;
  if (world()->rank() == 0) {
    CHECK_THROWS_WITH(models::train(o, world(), log),
                      Catch::Contains("--out " + o.out + ": cannot create the directory (Not a directory)"));
  } else {
    CHECK_THROWS_WITH(
        models::train(o, world(), log),
        Catch::Contains("--out " + o.out + ": rank 0 found: cannot create the directory (Not a directory)"));
  }
  CHECK(log.str().empty());  // before training
}

TEST_CASE("a run with FID logs fid_ema at its iterations, with the cached feature network", "[train][fid]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  const models::TrainOptions o = fid_run("fid-run");
  const std::string &dir = o.out, &cache = o.fid_cache;
  std::ostringstream log;
  models::train(o, world(), log);
  if (world()->rank() == 0) {
    INFO(log.str());
    CHECK(log.str().find("at iteration 4 (features ") != std::string::npos);
    std::ifstream in(dir + "/metrics.jsonl");
    std::vector<int64_t> with_fid;
    for (std::string line; std::getline(in, line);) {
      testing::JsonValue v = testing::JsonReader::parse(line);
      if (!v.members.count("fid_ema")) continue;
      with_fid.push_back(static_cast<int64_t>(v.at("iteration").number));
      CHECK(std::isfinite(v.at("fid_ema").number));
      CHECK(v.at("fid_ema").number > 0.0);
    }
    CHECK(with_fid == std::vector<int64_t>{4, 6});
    CHECK(fs::exists(cache));
  }
}

TEST_CASE("a log point's checkpoint is on disk before its FID, which may fail", "[train][fid]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  models::TrainOptions o = fid_run("fid-run-order");
  o.ckpt_every = 4;
  std::ostringstream log;
  ::setenv(models::kFidFaultEnv, "1", 1);
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains("fid_ema failed on purpose"));
  ::unsetenv(models::kFidFaultEnv);
  if (world()->rank() == 0) CHECK(fs::exists(o.out + "/ckpt-000004.safetensors"));
}

TEST_CASE("an --fid-cache that is a file is refused before any training, naming the flag", "[train][fid]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  const std::string dir = fresh_dir("fid-cache-file");
  const std::string not_a_dir = dir + "/cache";
  if (world()->rank() == 0) std::ofstream(not_a_dir) << "a file, not a directory";
  world()->barrier("file written")->wait();
  std::ostringstream log;
  auto o = short_run("mlp", dir + "/run", 4);
  o.fid_every = 2;
  o.fid_cache = not_a_dir;
  CHECK_THROWS_WITH(models::train(o, world(), log), Catch::Contains("--fid-cache " + not_a_dir) &&
                                                        Catch::Contains(not_a_dir + " is not a directory"));
  CHECK(log.str().find("training (") == std::string::npos);  // no feature network trained first
}

TEST_CASE("a generator gone non-finite logs no FID and the run goes on, its checkpoints written",
          "[train][fid]") {
  if (!fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  models::TrainOptions o = fid_run("fid-run-nan");
  o.lr = 1e30;  // the generator's output is NaN from the second iteration on
  o.ckpt_every = 4;
  const std::string& dir = o.out;
  std::ostringstream log;
  models::train(o, world(), log);  // used to end at the FID: the eigen-decomposition did not converge
  if (world()->rank() == 0) {
    INFO(log.str());
    CHECK(log.str().find("fid_ema: non-finite samples at iteration 4") != std::string::npos);
    CHECK(fs::exists(dir + "/ckpt-000004.safetensors"));
    std::ifstream in(dir + "/metrics.jsonl");
    int fid_nulls = 0;
    for (std::string line; std::getline(in, line);) {
      testing::JsonValue v = testing::JsonReader::parse(line);
      if (v.members.count("fid_ema")) fid_nulls += v.at("fid_ema").kind == testing::JsonValue::Kind::null;
    }
    CHECK(fid_nulls == 2);  // iterations 4 and 6
  }
}