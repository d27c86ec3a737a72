// set_low_precision (models/gan.h): which layers of a model get the compute dtype, and what
// a model without layers of one resolution each says.
#include <catch2/catch.hpp>
#include <map>
#include <string>

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
