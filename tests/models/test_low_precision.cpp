// set_low_precision (models/gan.h): which layers of a model get the compute dtype, and what
// a model without layers of one resolution each says.
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/gan.h"

using namespace tandem;

namespace {

// The compute dtype of each GEMM layer, by name ("" when none was given).
std::map<std::string, std::string> layer_dtypes(models::GanModel& model) {
  std::map<std::string, std::string> out;
  for (const auto& [name, module] : model.named_modules()) {
    if (!module->named_children().empty() || module->named_parameters().empty()) continue;
    const std::optional<DType> dtype = module->assigned_compute_dtype();
    out[name] = dtype ? dtype_name(*dtype) : "";
  }
  return out;
}

}  // namespace

TEST_CASE("K low-precision resolutions: dcgan64's layers of the K highest, in G and D", "[precision]") {
  models::GanConfig config;
  config.model = "dcgan64";
  config.width = 8;
  config.precision = DType::bf16;
  config.low_precision_res = 2;
  auto model = models::make_gan(config);
  const auto dtypes = layer_dtypes(*model);
  // G's transposed convolutions make 4, 8, 16, 32, 64 (modules 0, 3, 6, 9, 12); D's
  // convolutions read 64, 32, 16, 8, 4 (modules 0, 2, 5, 8, 11). Batch norms stay unset.
  const std::map<std::string, std::string> want = {{"generator.0", ""},
                                                   {"generator.1", ""},
                                                   {"generator.3", ""},
                                                   {"generator.4", ""},
                                                   {"generator.6", ""},
                                                   {"generator.7", ""},
                                                   {"generator.9", "bfloat16"},
                                                   {"generator.10", ""},
                                                   {"generator.12", "bfloat16"},
                                                   {"discriminator.0", "bfloat16"},
                                                   {"discriminator.2", "bfloat16"},
                                                   {"discriminator.3", ""},
                                                   {"discriminator.5", ""},
                                                   {"discriminator.6", ""},
                                                   {"discriminator.8", ""},
                                                   {"discriminator.9", ""},
                                                   {"discriminator.11", ""}};
  CHECK(dtypes == want);
  // All: every module of the model.
  config.low_precision_res = -1;
  for (const auto& [name, dtype] : layer_dtypes(*models::make_gan(config))) {
    INFO(name);
    CHECK(dtype == "bfloat16");
  }
  // More resolutions than the model has: all of its resolution layers.
  config.model = "dcgan";
  config.width = 0;
  config.low_precision_res = 9;
  for (const auto& [name, dtype] : layer_dtypes(*models::make_gan(config))) {
    INFO(name);
    const bool batch_norm = name == "generator.2" || name == "generator.5";
    CHECK(dtype == (batch_norm ? "" : "bfloat16"));
  }
}

TEST_CASE("a model without layers of one resolution each takes a dtype for all of them only", "[precision]") {
  models::GanConfig config;
  config.model = "mlp";
  config.precision = DType::f16;
  config.low_precision_res = 1;
  CHECK_THROWS_WITH(models::make_gan(config),
                    Catch::Contains("mlp: its layers are not of one resolution each"));
  config.low_precision_res = -1;
  for (const auto& [name, dtype] : layer_dtypes(*models::make_gan(config))) {
    INFO(name);
    CHECK(dtype == "float16");
  }
}

namespace {

// Every module of the model, with the compute dtype it should hold: `dtype` for the
// modules at or under one of `prefixes` (module names), none for the others.
void check_reduced_modules(models::GanModel& model, const std::vector<std::string>& prefixes, DType dtype) {
  for (const auto& [name, module] : model.named_modules()) {
    bool reduced = false;
    for (const std::string& p : prefixes) reduced |= name == p || name.rfind(p + ".", 0) == 0;
    INFO(name);
    const std::optional<DType> assigned = module->assigned_compute_dtype();
    CHECK(assigned.has_value() == reduced);
    if (assigned && reduced) CHECK(*assigned == dtype);
  }
}

}  // namespace

TEST_CASE("K low-precision resolutions: stylegan2's synthesis layers and D blocks, the mapping kept",
          "[precision]") {
  models::GanConfig config;
  config.model = "stylegan2";
  config.precision = DType::f16;
  config.low_precision_res = 1;  // 28x28: G's last two convs and toRGB; D's fromRGB and first block
  const std::vector<std::string> at28 = {"generator.conv3", "generator.conv4", "generator.to_rgb2",
                                         "discriminator.from_rgb", "discriminator.block28"};
  check_reduced_modules(*models::make_gan(config), at28, DType::f16);
  config.low_precision_res = 2;  // and 14x14
  std::vector<std::string> at14 = at28;
  for (const char* name :
       {"generator.conv1", "generator.conv2", "generator.to_rgb1", "discriminator.block14"})
    at14.push_back(name);
  check_reduced_modules(*models::make_gan(config), at14, DType::f16);
  config.low_precision_res = 3;  // every resolution; the mapping network has none
  std::vector<std::string> every = at14;
  for (const char* name : {"generator.conv0", "generator.to_rgb0", "discriminator.conv", "discriminator.fc",
                           "discriminator.out"})
    every.push_back(name);
  check_reduced_modules(*models::make_gan(config), every, DType::f16);
}

TEST_CASE("K low-precision resolutions: r3gan's blocks and transitions by the side they work at",
          "[precision]") {
  models::GanConfig config;
  config.model = "r3gan";
  config.precision = DType::bf16;
  config.low_precision_res = 2;  // 28x28 and 14x14
  check_reduced_modules(
      *models::make_gan(config),
      {"generator.block1", "generator.up1", "generator.block2", "generator.to_image",
       "discriminator.from_image", "discriminator.block0", "discriminator.down0", "discriminator.block1"},
      DType::bf16);
}
