// The sample writer against pictures made by hand: a second model given the moving average
// as its generator weights, the documented noise, and the data library's writers.
#include <catch2/catch.hpp>
#include <filesystem>
#include <memory>
#include <vector>

#include "autograd/grad_mode.h"
#include "models/data/png_writer.h"
#include "models/gan.h"
#include "models/train/sample_writer.h"
#include "models/training/ema_weights.h"
#include "runtime/rng.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::models;
using namespace tandem::testing;

namespace {

std::vector<std::vector<double>> snapshot(const GanModel& model) {
  std::vector<std::vector<double>> out;
  for (const Variable& p : model.parameters()) out.push_back(p.data().to_vector());
  for (const auto& [name, buffer] : model.named_buffers()) out.push_back(buffer.to_vector());
  return out;
}

// A model whose generator weights have moved away from their average.
struct Trained {
  std::shared_ptr<GanModel> model;
  training::EmaWeights ema;
  explicit Trained(const std::string& name, int64_t channels = 1)
      : model(make_gan(GanConfig{.model = name, .seed = 1, .channels = channels})),
        ema(model->generator->parameters(), 0.5) {
    Generator gen(3);
    for (Variable& p : model->generator->parameters()) fill_normal(p.data(), 0.0, 0.1, gen);
    ema.update(50);  // decay 0.5: halfway between the initial and the new weights
  }
};

// What write() must have drawn: the same model built again, the average copied in by hand,
// noise from a Generator seeded seed + kSampleNoiseSeed, the generator in training mode.
Tensor reference_samples(const std::string& name, const training::EmaWeights& ema, uint64_t seed,
                         int64_t count, int64_t channels = 1) {
  std::shared_ptr<GanModel> model = make_gan(GanConfig{.model = name, .seed = 1, .channels = channels});
  std::vector<Variable> params = model->generator->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].data().copy_(ema.tensors()[i]);
  Tensor z = Tensor::empty({count, model->noise_dim()});
  Generator gen(seed + 4242);
  fill_normal(z, 0.0, 1.0, gen);
  NoGradGuard no_grad;
  return model->generate(Variable(z)).data();
}

}  // namespace

TEST_CASE("sample pictures are named by the iteration, zero-padded to 6 digits", "[samples]") {
  CHECK(sample_path("runs/a", 42) == "runs/a/samples-000042.png");
  CHECK(sample_path("runs/a", 1234567) == "runs/a/samples-1234567.png");
}

TEST_CASE("ring8 samples: the scatter and quality of the average's samples, the run untouched", "[samples]") {
  TempDir tmp("samples");
  Trained run("ring8-mlp");
  const auto before = snapshot(*run.model);
  SampleWriter writer(tmp.path.string(), 7, *run.model, run.ema, Device::cpu());
  Samples got = writer.write(12);
  CHECK(got.path == tmp.file("samples-000012.png"));
  CHECK(snapshot(*run.model) == before);

  Tensor want = reference_samples("ring8-mlp", run.ema, 7, 2500);
  data::Ring8Quality q = data::ring8_quality(want);
  REQUIRE(got.ring8.has_value());
  CHECK(got.ring8->modes_covered == q.modes_covered);
  CHECK(got.ring8->high_quality_fraction == q.high_quality_fraction);
  CHECK(got.ring8->per_mode_counts == q.per_mode_counts);
  CHECK(got.ring8->count == 2500);
  data::write_ring8_scatter_png(tmp.file("reference.png"), want, data::ring8_modes());
  CHECK(read_bytes(got.path) == read_bytes(tmp.file("reference.png")));
  CHECK(read_bytes(writer.write(13).path) == read_bytes(got.path));  // the same noise every time
}

TEST_CASE("image samples: a grid of the average's samples; batch norm statistics untouched", "[samples]") {
  TempDir tmp("samples");
  Trained run("dcgan");
  REQUIRE_FALSE(run.model->named_buffers().empty());  // running statistics that sampling updates
  const auto before = snapshot(*run.model);
  Samples got = SampleWriter(tmp.path.string(), 7, *run.model, run.ema, Device::cpu()).write(3);
  CHECK(got.path == tmp.file("samples-000003.png"));
  CHECK_FALSE(got.ring8.has_value());
  CHECK(snapshot(*run.model) == before);

  Tensor want = reference_samples("dcgan", run.ema, 7, 64).reshape({64, 1, 28, 28});
  data::write_png_gray_grid(tmp.file("reference.png"), want, 8, 2);
  CHECK(read_bytes(got.path) == read_bytes(tmp.file("reference.png")));
}

TEST_CASE("image samples of a 3-channel model: an RGB grid", "[samples]") {
  TempDir tmp("samples");
  Trained run("dcgan", 3);
  Samples got = SampleWriter(tmp.path.string(), 7, *run.model, run.ema, Device::cpu()).write(3);
  Tensor want = reference_samples("dcgan", run.ema, 7, 64, 3).reshape({64, 3, 28, 28});
  data::write_png_rgb_grid(tmp.file("reference.png"), want, 8, 2);
  CHECK(read_bytes(got.path) == read_bytes(tmp.file("reference.png")));
}
