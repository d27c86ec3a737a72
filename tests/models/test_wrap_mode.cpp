// WrapMode: the names the --wrap flag and messages use, and the wrapped GAN's check of an
// explicit prepare against the mode.
#include <catch2/catch.hpp>

#include "models/gan.h"
#include "models/wrap_mode.h"
#include "models/wrapped_gan.h"

using namespace tandem;
using namespace tandem::models;

TEST_CASE("wrap modes parse from exactly their names and print them", "[wrap]") {
  CHECK(std::string(wrap_mode_name(WrapMode::whole)) == "whole");
  CHECK(std::string(wrap_mode_name(WrapMode::separate)) == "separate");
  CHECK(std::string(wrap_mode_name(WrapMode::none)) == "none");
  CHECK(parse_wrap_mode("whole") == WrapMode::whole);
  CHECK(parse_wrap_mode("separate") == WrapMode::separate);
  CHECK(parse_wrap_mode("none") == WrapMode::none);
  for (const char* other : {"", "Whole", "whole ", "sep", "separately", "off"}) {
    INFO("'" << other << "'");
    CHECK_FALSE(parse_wrap_mode(other).has_value());
  }
}

TEST_CASE("an explicit prepare with a wrap other than whole is an error naming the wrap", "[wrap][errors]") {
  for (WrapMode mode : {WrapMode::separate, WrapMode::none}) {
    WrappedGanOptions options;
    options.wrap = mode;
    options.explicit_prepare = true;
    CHECK_THROWS_WITH(
        WrappedGan(make_gan(GanConfig{}), nullptr, options),
        Catch::Contains(std::string("goes with the whole-model wrap, not '") + wrap_mode_name(mode) + "'"));
  }
}

TEST_CASE("wrap none trains the model alone: no reducer, nothing sent", "[wrap]") {
  WrappedGanOptions options;
  options.wrap = WrapMode::none;
  std::shared_ptr<GanModel> model = make_gan(GanConfig{});
  WrappedGan wrapped(model, nullptr, options);
  Batch batch;
  batch.inputs = Tensor::zeros({4, 2});
  batch.targets = Tensor::zeros({4, model->noise_dim()});
  LogVars log = wrapped.train_step(batch);
  CHECK(log.count("loss_d") == 1);
  CHECK(log.count("loss_g") == 1);
  CHECK(wrapped.reducers().empty());
  CHECK(wrapped.total_bytes() == 0);
}
