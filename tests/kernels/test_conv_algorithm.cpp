// The convolution algorithm mode (TANDEM_CUDNN and its C++ API) and the plan cache's keys,
// on the CPU: parsing, the environment read, key equality and hashing, make-once caching.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <stdexcept>

#include "kernels/conv.h"
#include "kernels/conv_algorithm.h"
#include "runtime/error.h"

using namespace tandem;
using namespace tandem::kernels;

namespace {

// Sets TANDEM_CUDNN (nullptr: unset) for one test and forgets any mode set in code, so the
// next conv_algorithm_mode() reads it; restores "unset" afterwards.
struct EnvMode {
  explicit EnvMode(const char* value) {
    if (value == nullptr)
      unsetenv("TANDEM_CUDNN");
    else
      setenv("TANDEM_CUDNN", value, 1);
    reset_conv_algorithm_mode();
  }
  ~EnvMode() {
    unsetenv("TANDEM_CUDNN");
    reset_conv_algorithm_mode();
  }
};

ConvPlanKey dcgan_key() {
  ConvPlanKey key;
  key.pass = ConvPass::forward;
  key.n = 64, key.c = 1, key.h = 28, key.w = 28, key.o = 64, key.kh = 4, key.kw = 4;
  key.stride = 2, key.padding = 1;
  return key;
}

}  // namespace

TEST_CASE("conv algorithm modes parse by name and name the setting on a bad value") {
  CHECK(parse_conv_algorithm_mode("off", "X") == ConvAlgorithmMode::off);
  CHECK(parse_conv_algorithm_mode("on", "X") == ConvAlgorithmMode::on);
  CHECK(parse_conv_algorithm_mode("benchmark", "X") == ConvAlgorithmMode::benchmark);
  for (ConvAlgorithmMode mode : {ConvAlgorithmMode::off, ConvAlgorithmMode::on, ConvAlgorithmMode::benchmark})
    CHECK(parse_conv_algorithm_mode(conv_algorithm_mode_name(mode), "X") == mode);
  for (const char* bad : {"ON", "fast", "1", "on ", "benchmarks"})
    CHECK_THROWS_WITH(
        parse_conv_algorithm_mode(bad, "--cudnn"),
        Catch::Contains("--cudnn='" + std::string(bad) + "'") && Catch::Contains("use off, on or benchmark"));
}

TEST_CASE("the conv algorithm mode comes from TANDEM_CUDNN until code sets it") {
  {
    EnvMode env(nullptr);
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::on);  // the default
  }
  {
    EnvMode env("");
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::on);
  }
  {
    EnvMode env("benchmark");
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::benchmark);
    set_conv_algorithm_mode(ConvAlgorithmMode::off);  // code wins over the environment
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::off);
    reset_conv_algorithm_mode();
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::benchmark);
  }
  {
    EnvMode env("off");
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::off);
  }
  {
    EnvMode env("cudnn");
    CHECK_THROWS_WITH(conv_algorithm_mode(),
                      Catch::Contains("TANDEM_CUDNN='cudnn'") && Catch::Contains("use off, on or benchmark"));
    CHECK_THROWS(conv_algorithm_mode());  // still wrong at the next read
    set_conv_algorithm_mode(ConvAlgorithmMode::on);
    CHECK(conv_algorithm_mode() == ConvAlgorithmMode::on);
  }
}

TEST_CASE("conv plan keys differ in every field they depend on") {
  const ConvPlanKey base = dcgan_key();
  const ConvPlanKeyHash hash;
  CHECK(base == dcgan_key());
  CHECK(hash(base) == hash(dcgan_key()));
  std::vector<ConvPlanKey> variants;
  auto vary = [&](auto change) {
    ConvPlanKey k = base;
    change(k);
    variants.push_back(k);
  };
  vary([](ConvPlanKey& k) { k.pass = ConvPass::backward_data; });
  vary([](ConvPlanKey& k) { k.pass = ConvPass::backward_filter; });
  vary([](ConvPlanKey& k) { k.n = 65; });
  vary([](ConvPlanKey& k) { k.c = 3; });
  vary([](ConvPlanKey& k) { k.h = 29; });
  vary([](ConvPlanKey& k) { k.w = 27; });
  vary([](ConvPlanKey& k) { k.o = 128; });
  vary([](ConvPlanKey& k) { k.kh = 3; });
  vary([](ConvPlanKey& k) { k.kw = 5; });
  vary([](ConvPlanKey& k) { k.stride = 1; });
  vary([](ConvPlanKey& k) { k.padding = 0; });
  vary([](ConvPlanKey& k) { k.dilation = 2; });
  vary([](ConvPlanKey& k) { k.groups = 2; });
  vary([](ConvPlanKey& k) { k.ho = 15; });  // a transposed geometry's output_padding
  vary([](ConvPlanKey& k) { k.wo = 15; });
  vary([](ConvPlanKey& k) { k.dtype = DType::f64; });
  vary([](ConvPlanKey& k) { k.device = 1; });
  vary([](ConvPlanKey& k) { k.mode = ConvAlgorithmMode::benchmark; });
  for (size_t i = 0; i < variants.size(); ++i) {
    INFO("variant " << i << ": " << variants[i].str());
    CHECK_FALSE(variants[i] == base);
    CHECK(hash(variants[i]) != hash(base));
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(variants[i] == variants[j]);
  }
  const std::string text = base.str();
  CHECK(text ==
        "forward of conv2d x [64, 1, 28, 28] weight [64, 1, 4, 4] stride 2 padding 1 float32 on cuda:0 (on)");
  ConvPlanKey grouped = base;
  grouped.c = 8, grouped.groups = 4, grouped.dilation = 2;
  CHECK(grouped.str() ==
        "forward of conv2d x [64, 8, 28, 28] weight [64, 2, 4, 4] stride 2 padding 1 dilation 2 groups 4 "
        "float32 "
        "on cuda:0 (on)");
}

TEST_CASE("the conv plan cache makes each key's plan once") {
  ConvPlanCache<int> cache;
  int made = 0;
  auto make = [&] { return ++made * 10; };
  const ConvPlanKey key = dcgan_key();
  CHECK(cache.get_or_make(key, make) == 10);
  CHECK(cache.get_or_make(key, make) == 10);
  CHECK(made == 1);
  ConvPlanKey bench = key;
  bench.mode = ConvAlgorithmMode::benchmark;  // another mode chooses again
  CHECK(cache.get_or_make(bench, make) == 20);
  CHECK(cache.get_or_make(key, make) == 10);
  CHECK(made == 2);
  CHECK(cache.size() == 2);
  ConvPlanKey other = key;
  other.pass = ConvPass::backward_filter;
  CHECK_THROWS(cache.get_or_make(other, []() -> int { throw std::runtime_error("refused"); }));
  CHECK(cache.size() == 2);  // a failed make stores nothing, so the next call tries again
  CHECK(cache.get_or_make(other, make) == 30);
}

TEST_CASE("CPU convolutions ignore the conv algorithm mode") {
  Tensor x = Tensor::ones({2, 3, 6, 6}, DType::f64), w = Tensor::ones({4, 3, 3, 3}, DType::f64);
  const ConvDispatchCounts before = conv_dispatch_counts();
  set_conv_algorithm_mode(ConvAlgorithmMode::benchmark);
  Tensor y_bench = conv2d(x, w, {1, 1, 0});
  set_conv_algorithm_mode(ConvAlgorithmMode::off);
  Tensor y_off = conv2d(x, w, {1, 1, 0});
  reset_conv_algorithm_mode();
  CHECK(y_bench.to_vector() == y_off.to_vector());
  CHECK(y_off.to_vector()[7] == 27.0);  // an interior output sees the whole 3x3x3 window
  CHECK(conv_dispatch_counts().cudnn == before.cudnn);
  CHECK(conv_dispatch_counts().im2col == before.im2col);
}
