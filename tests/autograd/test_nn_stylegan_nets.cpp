// StyleGAN's composed networks (autograd/nn_stylegan_nets.h): the mapping network against a
// direct loop over its weights, the residual block against its composition from plain
// conv2d with the equalised scales written out (with and without the 1x1 skip), gradchecks
// of both with their weights as float64 inputs (second order in test_second_order.cpp), and
// the named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn_stylegan_nets.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

double act(double x) { return std::sqrt(2.0) * (x < 0 ? 0.2 * x : x); }

}  // namespace

TEST_CASE("MappingNetwork: pixel_norm, then equalised layers at lr_mul 0.01 with gain-sqrt(2) leaky ReLU",
          "[nn][stylegan]") {
  Generator gen(31);
  nn::MappingNetwork net(4, 3, {.layers = 3}, gen);
  REQUIRE(net.layers.size() == 3);
  CHECK(net.named_parameters()[0].first == "fc0.weight");
  CHECK(nn::MappingNetwork(4, 3).layers.size() == 8);  // StyleGAN's default depth
  // Non-zero biases, so that their lr_mul scale is seen.
  for (size_t l = 0; l < 3; ++l) {
    Tensor b = net.layers[l]->bias.data();
    for (int64_t j = 0; j < 3; ++j)
      b.data<float>()[j] = static_cast<float>(10.0 * (j + 1) * (l % 2 ? -1 : 1));
  }
  const Tensor z = random_input({2, 4}, 501).data().to(DType::f32);
  const std::vector<double> got = net(Variable(z)).data().to_vector();
  // The direct loop.
  const std::vector<double> zv = z.to_vector();
  std::vector<double> want;
  for (int n = 0; n < 2; ++n) {
    std::vector<double> h(zv.begin() + n * 4, zv.begin() + n * 4 + 4);
    double ms = 0;
    for (double e : h) ms += e * e / 4;
    for (double& e : h) e /= std::sqrt(ms + 1e-8);
    for (size_t l = 0; l < 3; ++l) {
      const std::vector<double> w = net.layers[l]->weight.data().to_vector(),
                                b = net.layers[l]->bias.data().to_vector();
      const double c = 0.01 / std::sqrt(static_cast<double>(h.size()));
      std::vector<double> y(3);
      for (size_t j = 0; j < 3; ++j) {
        double s = b[j] * 0.01;
        for (size_t i = 0; i < h.size(); ++i) s += w[j * h.size() + i] * c * h[i];
        y[j] = act(s);
      }
      h = y;
    }
    want.insert(want.end(), h.begin(), h.end());
  }
  check_close(got, want, 1e-5);
}

TEST_CASE("ResidualBlock: (act(conv2(act(conv1 x))) + skip(x)) / sqrt(2)", "[nn][stylegan]") {
  for (int64_t out : {int64_t{2}, int64_t{3}}) {
    INFO("2 -> " << out << " channels");
    Generator gen(32);
    nn::ResidualBlock block(2, out, {}, gen);
    CHECK((block.skip != nullptr) == (out != 2));
    for (const auto& conv : {block.conv1, block.conv2}) conv->bias.data().fill_(0.3);
    const Variable x(random_input({2, 2, 4, 4}, 502).data().to(DType::f32));
    auto a = [](const Variable& h) { return scale(leaky_relu(h, 0.2), std::sqrt(2.0)); };
    const kernels::Conv2dParams same{1, 1, 0};
    Variable h = a(conv2d(x, scale(block.conv1->weight, 1.0 / std::sqrt(2.0 * 9)), block.conv1->bias, same));
    h = a(conv2d(h, scale(block.conv2->weight, 1.0 / std::sqrt(out * 9.0)), block.conv2->bias, same));
    const Variable s =
        out == 2 ? x : conv2d(x, scale(block.skip->weight, 1.0 / std::sqrt(2.0)), Variable(), {1, 0, 0});
    const Variable want = scale(add(h, s), 1.0 / std::sqrt(2.0));
    const Variable got = block(x);
    CHECK(got.shape() == Shape{2, out, 4, 4});
    check_close(got.data().to_vector(), want.data().to_vector(), 1e-5);
  }
}

TEST_CASE("gradcheck: ResidualBlock and MappingNetwork with float64 weights", "[gradcheck][nn][stylegan]") {
  nn::ResidualBlock block(2, 3);
  expect_gradients_match(
      "ResidualBlock 2 -> 3",
      [&block](const std::vector<Variable>& v) {
        block.conv1->weight = v[1];
        block.conv1->bias = v[2];
        block.conv2->weight = v[3];
        block.conv2->bias = v[4];
        block.skip->weight = v[5];
        return block(v[0]);
      },
      {random_input({1, 2, 3, 3}, 503), random_input({3, 2, 3, 3}, 504), random_input({3}, 505),
       random_input({3, 3, 3, 3}, 506), random_input({3}, 512), random_input({3, 2, 1, 1}, 507)});
  nn::MappingNetwork net(3, 2, {.layers = 2, .lr_multiplier = 0.5});
  expect_gradients_match("MappingNetwork, 2 layers",
                         [&net](const std::vector<Variable>& v) {
                           net.layers[0]->weight = v[1];
                           net.layers[0]->bias = v[2];
                           net.layers[1]->weight = v[3];
                           net.layers[1]->bias = v[4];
                           return net(v[0]);
                         },
                         {random_input({2, 3}, 508), random_input({2, 3}, 509), random_input({2}, 513),
                          random_input({2, 2}, 510), random_input({2}, 511)});
}

TEST_CASE("ResidualBlock and MappingNetwork errors name the module and the shapes",
          "[nn][stylegan][errors]") {
  CHECK_THROWS_WITH(nn::ResidualBlock(0, 2),
                    Catch::Contains("ResidualBlock: channel counts must be positive"));
  CHECK_THROWS_WITH(nn::ResidualBlock(2, 3)(Variable(Tensor::zeros({1, 3, 4, 4}))),
                    Catch::Contains("ResidualBlock: needs [N, 2, H, W], got [1, 3, 4, 4]"));
  CHECK_THROWS_WITH(nn::MappingNetwork(4, 3, {.layers = 0}),
                    Catch::Contains("MappingNetwork: z_dim, w_dim and layers"));
  CHECK_THROWS_WITH(nn::MappingNetwork(4, 3)(Variable(Tensor::zeros({2, 5}))),
                    Catch::Contains("MappingNetwork: needs z [N, 4], got [2, 5]"));
}
