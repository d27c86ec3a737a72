// Module tree: names, state dicts, modes, requires_grad_, zero_grad, layers and initialisers.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "autograd/init.h"
#include "autograd/module.h"
#include "autograd/nn.h"
#include "autograd/ops.h"

using namespace tandem;

namespace {

// A discriminator-like model: conv blocks in a Sequential, then a head.
struct Block : nn::Module {
  explicit Block(int64_t c, Generator& gen) {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(c, c, 3, 1, 1, true, gen));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(c));
  }
  Variable forward(const Variable& x) override { return leaky_relu(bn->forward(conv->forward(x)), 0.2); }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

struct Disc : nn::Module {
  explicit Disc(Generator& gen) {
    blocks = register_module("blocks", std::make_shared<nn::Sequential>());
    for (int i = 0; i < 3; ++i)
      blocks->push_back(std::make_shared<Block>(2, gen));  // grows after registration
    head = register_module("head", std::make_shared<nn::Linear>(2 * 4 * 4, 1, true, gen));
  }
  Variable forward(const Variable& x) override { return head->forward(flatten(blocks->forward(x))); }
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::Linear> head;
};

struct Gen : nn::Module {
  explicit Gen(Generator& gen) {
    fc = register_module("fc", std::make_shared<nn::Linear>(3, 2 * 4 * 4, true, gen));
  }
  Variable forward(const Variable& z) override { return tanh(reshape(fc->forward(z), {z.size(0), 2, 4, 4})); }
  std::shared_ptr<nn::Linear> fc;
};

struct Gan : nn::Module {
  explicit Gan(uint64_t seed) : gen_(seed) {
    G = register_module("G", std::make_shared<Gen>(gen_));
    D = register_module("D", std::make_shared<Disc>(gen_));
  }
  Generator gen_;
  std::shared_ptr<Gen> G;
  std::shared_ptr<Disc> D;
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Variable>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, v] : named) out.push_back(n);
  return out;
}

}  // namespace

TEST_CASE("parameters have hierarchical dotted names in registration order", "[module]") {
  Gan gan(1);
  const std::vector<std::string> expected = {
      "G.fc.weight",          "G.fc.bias",          "D.blocks.0.conv.weight", "D.blocks.0.conv.bias",
      "D.blocks.0.bn.weight", "D.blocks.0.bn.bias", "D.blocks.1.conv.weight", "D.blocks.1.conv.bias",
      "D.blocks.1.bn.weight", "D.blocks.1.bn.bias", "D.blocks.2.conv.weight", "D.blocks.2.conv.bias",
      "D.blocks.2.bn.weight", "D.blocks.2.bn.bias", "D.head.weight",          "D.head.bias"};
  auto named = gan.named_parameters();
  CHECK(names_of(named) == expected);
  // Every Variable carries its full name, also when listed from a submodule.
  for (const auto& [n, v] : named) CHECK(v.name() == n);
  auto d_named = gan.D->named_parameters();
  REQUIRE(d_named.size() == 14);
  CHECK(d_named[8].first == "blocks.2.conv.weight");
  CHECK(d_named[8].second.name() == "D.blocks.2.conv.weight");
  CHECK(gan.D->blocks->operator[](2)->path() == "D.blocks.2");
  CHECK(gan.parameters().size() == 16);
  CHECK(gan.D->parameters().size() == 14);

  auto buffers = gan.named_buffers();
  REQUIRE(buffers.size() == 6);
  CHECK(buffers[0].first == "D.blocks.0.bn.running_mean");
  CHECK(buffers[5].first == "D.blocks.2.bn.running_var");

  auto children = gan.named_children();
  REQUIRE(children.size() == 2);
  CHECK(children[0].first == "G");
  CHECK(children[1].second.get() == gan.D.get());
  CHECK(gan.named_modules().size() ==
        1 + 2 + 1 + 1 + 3 * 3 + 1);  // self, G, G.fc, D, blocks, 3x(block, conv, bn), head

  CHECK_THROWS_WITH(gan.register_module("G", std::make_shared<nn::Tanh>()), Catch::Contains("'G'"));
  CHECK_THROWS_WITH(gan.register_buffer("a.b", Tensor::zeros({1})), Catch::Contains("'a.b'"));
}

namespace type_name_test {
struct Encoder : nn::Module {};
}  // namespace type_name_test

TEST_CASE("a module's default name in messages is its type's, without namespaces", "[module]") {
  type_name_test::Encoder encoder;
  CHECK(encoder.type_name() == "Encoder");
  CHECK(nn::Module().type_name() == "Module");
  CHECK_THROWS_WITH(encoder.forward(Variable()), Catch::Contains("Encoder has no single-input forward()"));
}

TEST_CASE("Sequential names children 0, 1, ... and runs them in order", "[module]") {
  Generator gen(7);
  auto l1 = std::make_shared<nn::Linear>(2, 3, true, gen);
  auto l2 = std::make_shared<nn::Linear>(3, 1, false, gen);
  nn::Sequential seq(l1, std::make_shared<nn::Tanh>(), l2);
  CHECK(seq.size() == 3);
  CHECK(names_of(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight"});
  seq.add(std::make_shared<nn::Sigmoid>());
  CHECK(seq.named_children().back().first == "3");
  Variable x = tensor({2, 2}, {0.5, -1.0, 2.0, 0.25});
  Variable want = sigmoid(linear(tanh(linear(x, l1->weight, l1->bias)), l2->weight, Variable()));
  CHECK(seq.forward(x).data().to_vector() == want.data().to_vector());
  CHECK_THROWS_WITH(seq[4], Catch::Contains("out of range"));
}

TEST_CASE("state_dict round-trips parameters and buffers into existing storage", "[module][state]") {
  Gan a(1), b(2);
  // Give a's BatchNorm buffers non-default values by a training forward.
  Variable z = tensor({4, 3}, {0.1, 0.2, 0.3, -0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.0, -1.1, 1.2});
  a.D->forward(a.G->forward(z));
  StateDict sa = a.state_dict();
  CHECK(sa.size() == 16 + 6);
  CHECK(sa.count("D.blocks.1.bn.running_var") == 1);
  CHECK(a.D->blocks->operator[](0)->state_dict().count("bn.running_mean") == 1);

  const float* b_weight_ptr = b.D->head->weight.data().data<float>();
  REQUIRE(b.D->head->weight.data().to_vector() != a.D->head->weight.data().to_vector());
  b.load_state_dict(sa);
  CHECK(b.D->head->weight.data().data<float>() == b_weight_ptr);  // copied in place
  for (const auto& [name, t] : b.state_dict()) {
    INFO(name);
    CHECK(t.to_vector() == sa.at(name).to_vector());
  }
  a.eval();
  b.eval();
  CHECK(b.D->forward(b.G->forward(z)).data().to_vector() == a.D->forward(a.G->forward(z)).data().to_vector());
}

TEST_CASE("load_state_dict names missing, unexpected and wrongly shaped entries", "[module][state][errors]") {
  Gan a(1), b(2);

  StateDict missing = a.state_dict();
  missing.erase("D.blocks.2.conv.weight");
  CHECK_THROWS_WITH(b.load_state_dict(missing), Catch::Contains("missing entry 'D.blocks.2.conv.weight'") &&
                                                    Catch::Contains("[2, 2, 3, 3]"));
  b.load_state_dict(missing, /*strict=*/false);  // allowed when not strict
  CHECK(b.D->head->weight.data().to_vector() == a.D->head->weight.data().to_vector());

  Gan c(3);
  const auto c_before = c.D->head->weight.data().to_vector();
  StateDict wrong = a.state_dict();
  wrong["D.head.weight"] = Tensor::zeros({1, 16});
  CHECK_THROWS_WITH(c.load_state_dict(wrong), Catch::Contains("'D.head.weight'") &&
                                                  Catch::Contains("[1, 16]") && Catch::Contains("[1, 32]"));
  CHECK_THROWS_WITH(c.load_state_dict(wrong, /*strict=*/false), Catch::Contains("'D.head.weight'"));
  CHECK(c.D->head->weight.data().to_vector() == c_before);  // nothing copied on failure
  CHECK(c.G->fc->weight.data().to_vector() != a.G->fc->weight.data().to_vector());

  StateDict extra = a.state_dict();
  extra["D.head.scale"] = Tensor::ones({1});
  CHECK_THROWS_WITH(c.load_state_dict(extra), Catch::Contains("unexpected entry 'D.head.scale'"));
}

TEST_CASE("train and eval reach every submodule", "[module]") {
  Gan gan(1);
  CHECK(gan.is_training());
  gan.eval();
  for (auto& [name, m] : gan.named_modules()) {
    INFO(name);
    CHECK_FALSE(m->is_training());
  }
  gan.D->train();
  CHECK(gan.D->blocks->operator[](1)->is_training());
  CHECK_FALSE(gan.G->fc->is_training());
  CHECK_FALSE(gan.is_training());
}

TEST_CASE("requires_grad_(false) on a submodule stops its gradients", "[module][grad]") {
  Gan gan(1);
  gan.G->requires_grad_(false);
  Variable z = tensor({4, 3}, {0.1, 0.2, 0.3, -0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.0, -1.1, 1.2});
  mean(gan.D->forward(gan.G->forward(z))).backward();
  for (const auto& [name, p] : gan.named_parameters()) {
    INFO(name);
    if (name.rfind("G.", 0) == 0) {
      CHECK_FALSE(p.requires_grad());
      CHECK_FALSE(p.grad().defined());
    } else {
      CHECK(p.grad().defined());
    }
  }
  gan.G->requires_grad_(true);
  gan.zero_grad();
  mean(gan.D->forward(gan.G->forward(z))).backward();
  CHECK(gan.G->fc->weight.grad().defined());
}

TEST_CASE("zero_grad clears or zeroes every gradient", "[module][grad]") {
  Gan gan(1);
  Variable z = tensor({4, 3}, {0.1, 0.2, 0.3, -0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.0, -1.1, 1.2});
  mean(gan.D->forward(gan.G->forward(z))).backward();
  Tensor handle = gan.D->head->weight.grad();
  gan.zero_grad(/*set_to_none=*/false);
  for (const auto& [name, p] : gan.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    for (double g : p.grad().to_vector()) CHECK(g == 0.0);
  }
  CHECK(gan.D->head->weight.grad().shares_storage_with(handle));
  gan.D->zero_grad();
  CHECK_FALSE(gan.D->head->weight.grad().defined());
  CHECK(gan.G->fc->weight.grad().defined());
}

TEST_CASE("BatchNorm updates running statistics in training mode only", "[module][batchnorm]") {
  nn::BatchNorm1d bn(2, 1e-5, 0.1);
  // Channel 0: 1, 2, 3, 6 (mean 3, unbiased var (4 + 1 + 0 + 9) / 3 = 14/3);
  // channel 1: 0, 0, 4, 4 (mean 2, unbiased var 16/3).
  Variable x = tensor({4, 2}, {1, 0, 2, 0, 3, 4, 6, 4});
  Variable y = bn.forward(x);
  // running = 0.9 * running + 0.1 * batch: mean (0.3, 0.2), var 0.9 + 0.1 * (14/3, 16/3).
  CHECK(bn.running_mean.at(0) == Approx(0.3));
  CHECK(bn.running_mean.at(1) == Approx(0.2));
  CHECK(bn.running_var.at(0) == Approx(0.9 + 1.4 / 3.0));
  CHECK(bn.running_var.at(1) == Approx(0.9 + 1.6 / 3.0));
  // Training output uses batch statistics (biased var 3.5): (1 - 3) / sqrt(3.5 + 1e-5).
  CHECK(y.data().at(0) == Approx(-2.0 / std::sqrt(3.5 + 1e-5)));

  bn.eval();
  const auto mean_before = bn.running_mean.to_vector(), var_before = bn.running_var.to_vector();
  Variable ye = bn.forward(x);
  CHECK(bn.running_mean.to_vector() == mean_before);
  CHECK(bn.running_var.to_vector() == var_before);
  // Eval output uses the running statistics.
  CHECK(ye.data().at(0) == Approx((1.0 - 0.3) / std::sqrt(0.9 + 1.4 / 3.0 + 1e-5)));
  // The registered buffers are the ones the layer updates.
  auto buffers = bn.named_buffers();
  REQUIRE(buffers.size() == 2);
  CHECK(buffers[0].first == "running_mean");
  CHECK(buffers[0].second.shares_storage_with(bn.running_mean));
  CHECK_THROWS_WITH(bn.forward(tensor({1, 3}, {1, 2, 3})),
                    Catch::Contains("BatchNorm1d(2)") && Catch::Contains("[1, 3]"));
}

TEST_CASE("default initialisation follows PyTorch's bounds and the generator", "[module][init]") {
  Generator g1(42), g2(42);
  nn::Linear a(100, 50, true, g1), b(100, 50, true, g2);
  CHECK(a.weight.data().to_vector() == b.weight.data().to_vector());  // same seed, same values
  CHECK(a.bias.data().to_vector() == b.bias.data().to_vector());
  auto check_bound = [](const Variable& v, double bound) {
    double lo = 1e9, hi = -1e9;
    for (double x : v.data().to_vector()) lo = std::min(lo, x), hi = std::max(hi, x);
    CHECK(lo >= -bound);
    CHECK(hi <= bound);
    CHECK(hi - lo > 1.8 * bound);  // the whole range is used
  };
  check_bound(a.weight, 1.0 / std::sqrt(100.0));
  check_bound(a.bias, 1.0 / std::sqrt(100.0));
  nn::Conv2d conv(8, 16, 3, 1, 1, true, g1);  // fan_in = 8 * 3 * 3
  check_bound(conv.weight, 1.0 / std::sqrt(72.0));
  CHECK(conv.weight.shape() == Shape{16, 8, 3, 3});
  nn::ConvTranspose2d convt(16, 8, 4, 2, 1, 0, true, g1);  // weight [16, 8, 4, 4], fan_in = 8 * 4 * 4
  check_bound(convt.weight, 1.0 / std::sqrt(128.0));
  CHECK(convt.weight.shape() == Shape{16, 8, 4, 4});
  nn::Linear no_bias(4, 2, false, g1);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);

  nn::init::normal_(a.weight, 0.0, 0.02, g1);  // DCGAN
  double sum = 0, sq = 0;
  auto w = a.weight.data().to_vector();
  for (double x : w) sum += x, sq += x * x;
  const double m = sum / static_cast<double>(w.size());
  CHECK(std::abs(m) < 0.002);
  CHECK(std::sqrt(sq / static_cast<double>(w.size()) - m * m) == Approx(0.02).epsilon(0.05));
  nn::init::zeros_(a.bias);
  CHECK(a.bias.data().to_vector() == std::vector<double>(50, 0.0));
  nn::init::ones_(a.bias);
  CHECK(a.bias.data().to_vector() == std::vector<double>(50, 1.0));
}

TEST_CASE("grouped and dilated conv layers: PyTorch's weight shapes, fan_in and forward", "[module]") {
  Generator gen(7);
  nn::Conv2d conv(6, 9, 3, {.padding = 2, .dilation = 2, .groups = 3}, true, gen);
  CHECK(conv.weight.shape() == Shape{9, 2, 3, 3});  // fan_in = 2 * 3 * 3
  for (double w : conv.weight.data().to_vector()) CHECK(std::abs(w) <= 1.0 / std::sqrt(18.0));
  CHECK(conv.type_name() == "Conv2d(6, 9, k=3, s=1, p=2, d=2, g=3)");
  Variable x = randn({2, 6, 5, 5}, gen);
  // The layer's geometry, written out here: its own params would agree with anything.
  const kernels::Conv2dParams written{.padding = 2, .dilation = 2, .groups = 3};
  const Variable y = conv.forward(x);
  CHECK(y.shape() == Shape{2, 9, 5, 5});
  CHECK(y.data().to_vector() == conv2d(x, conv.weight, conv.bias, written).data().to_vector());
  nn::ConvTranspose2d convt(4, 6, 4, {.stride = 2, .padding = 1, .groups = 2}, false, gen);
  CHECK(convt.weight.shape() == Shape{4, 3, 4, 4});
  CHECK(convt.type_name() == "ConvTranspose2d(4, 6, k=4, s=2, p=1, op=0, g=2)");
  CHECK(convt.forward(randn({1, 4, 3, 3}, gen)).shape() == Shape{1, 6, 6, 6});
  CHECK_THROWS_WITH(nn::Conv2d(6, 8, 3, {.groups = 4}),
                    Catch::Contains("Conv2d: in_channels 6 and out_channels 8 must divide by groups 4"));
  CHECK_THROWS_WITH(nn::ConvTranspose2d(4, 6, 3, {.dilation = 0}),
                    Catch::Contains("ConvTranspose2d: dilation must be positive, got 0"));
}

TEST_CASE("leaky_relu() and nn::LeakyReLU() share one default slope, PyTorch's 0.01", "[module]") {
  Variable x = tensor({4}, {-1.0, 2.0, -3.0, 4.0});
  const std::vector<double> expected{static_cast<float>(-0.01), 2, static_cast<float>(-0.03), 4};
  CHECK(leaky_relu(x).data().to_vector() == expected);
  CHECK(nn::LeakyReLU().forward(x).data().to_vector() == expected);
  CHECK(nn::LeakyReLU().type_name() == "LeakyReLU(0.01)");
}

TEST_CASE("parameter-free layers compute their ops", "[module]") {
  Variable x = tensor({1, 1, 2, 2}, {-1.0, 2.0, -3.0, 4.0});
  CHECK(nn::ReLU().forward(x).data().to_vector() == std::vector<double>{0, 2, 0, 4});
  CHECK(nn::LeakyReLU(0.5).forward(x).data().to_vector() == std::vector<double>{-0.5, 2, -1.5, 4});
  CHECK(nn::Flatten().forward(x).shape() == Shape{1, 4});
  CHECK(nn::Reshape({2, 2, 1}).forward(x).shape() == Shape{1, 2, 2, 1});
  CHECK(nn::Upsample().forward(x).shape() == Shape{1, 1, 4, 4});
  CHECK(nn::AvgPool().forward(x).data().to_vector() == std::vector<double>{0.5});
  nn::Module plain;
  CHECK_THROWS_WITH(plain.forward(x), Catch::Contains("no single-input forward"));
}
