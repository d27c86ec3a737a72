// The image models with 1 and 3 channels per pixel: what G makes, what D and the data take.
#include <catch2/catch.hpp>

#include "autograd/grad_mode.h"
#include "models/gan.h"
#include "runtime/rng.h"

using namespace tandem;
using namespace tandem::models;

TEST_CASE("image models take 3-channel pictures as well as 1-channel ones", "[models][channels]") {
  NoGradGuard no_grad;
  for (const std::string name : {"mlp", "dcgan", "pggan"}) {
    for (int64_t channels : {1, 3}) {
      INFO(name << ", " << channels << " channel(s)");
      std::shared_ptr<GanModel> model =
          make_gan(GanConfig{.model = name, .pggan_stage_iters = 10, .seed = 2, .channels = channels});
      model->set_iteration(25);  // pggan: stage 2, full resolution
      CHECK(model->data_shape() == Shape{channels, 28, 28});
      CHECK(model->sample_shape() == Shape{channels, 28, 28});
      Tensor z = Tensor::empty({4, model->noise_dim()});
      Generator gen(1);
      fill_normal(z, 0.0, 1.0, gen);
      Tensor fake = model->generate(Variable(z)).data();
      CHECK(fake.numel() == 4 * channels * 28 * 28);
      Tensor real = Tensor::empty({4, channels, 28, 28});
      fill_normal(real, 0.0, 1.0, gen);
      CHECK(model->discriminate(Variable(model->prepare_real(real))).data().shape() == Shape{4, 1});
    }
  }
  std::shared_ptr<GanModel> pggan =
      make_gan(GanConfig{.model = "pggan", .pggan_stage_iters = 10, .channels = 3});
  CHECK(pggan->sample_shape() == Shape{3, 7, 7});  // stage 0
  CHECK(pggan->data_shape() == Shape{3, 28, 28});
}

TEST_CASE("dcgan64: G maps [N, 100] to [N, C, 64, 64] and D maps that to [N, 1], for C = 1 and 3",
          "[models][channels][dcgan64]") {
  NoGradGuard no_grad;
  for (int64_t channels : {1, 3}) {
    INFO(channels << " channel(s)");
    std::shared_ptr<GanModel> model =
        make_gan(GanConfig{.model = "dcgan64", .seed = 2, .channels = channels});
    CHECK(model->noise_dim() == 100);
    CHECK(model->data_shape() == Shape{channels, 64, 64});
    Tensor z = Tensor::empty({2, 100});
    Generator gen(1);
    fill_normal(z, 0.0, 1.0, gen);
    Tensor fake = model->generate(Variable(z)).data();
    CHECK(fake.shape() == Shape{2, channels, 64, 64});
    CHECK(model->discriminate(Variable(fake)).data().shape() == Shape{2, 1});
    // The classic widths: ngf = ndf = 64, so G's first layer is [100, 512, 4, 4] and D's last [1, 512, 4, 4].
    CHECK(model->generator->named_parameters().front().second.shape() == Shape{100, 512, 4, 4});
    const auto d_params = model->discriminator->named_parameters();
    CHECK(d_params[d_params.size() - 2].second.shape() == Shape{1, 512, 4, 4});  // then its bias [1]
  }
  std::shared_ptr<GanModel> narrow = make_gan(GanConfig{.model = "dcgan64", .width = 8});
  CHECK(narrow->generator->named_parameters().front().second.shape() == Shape{100, 64, 4, 4});
  CHECK(narrow->structure() == "width 8 (ngf = ndf)");
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "dcgan", .width = 8}),
                    Catch::Contains("--width applies to the dcgan64 model only, not 'dcgan'"));
}

TEST_CASE("channels other than 1 or 3, or 3 for ring8-mlp, are errors naming them", "[models][channels]") {
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "dcgan", .channels = 2}),
                    Catch::Contains("channels per pixel must be 1 (gray) or 3 (RGB), got 2"));
  CHECK_THROWS_WITH(make_gan(GanConfig{.model = "ring8-mlp", .channels = 3}),
                    Catch::Contains("ring8-mlp learns 2-D points: it has no 3-channel form"));
}
