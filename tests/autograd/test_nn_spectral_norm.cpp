// Spectral normalisation (autograd/nn_spectral_norm.h): sigma against the largest singular
// value (an analytic rank-one case, and a direct-loop power iteration in float64 run to
// convergence), the layer's forward against the hand composition (one power iteration by a
// direct loop, then the layer with W / sigma), eval mode leaving u and v alone, the weight
// matrix of each layer kind against a direct loop, first-order gradchecks through W / sigma
// (second order in test_second_order.cpp), and the named errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn.h"
#include "autograd/nn_spectral_norm.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

using Matrix = std::vector<std::vector<double>>;

Matrix rows_of(const Tensor& t, int64_t h) {
  const std::vector<double> v = t.to_vector();
  const int64_t m = static_cast<int64_t>(v.size()) / h;
  Matrix out(static_cast<size_t>(h), std::vector<double>(static_cast<size_t>(m)));
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < m; ++j) out[size_t(i)][size_t(j)] = v[size_t(i * m + j)];
  return out;
}

std::vector<double> unit(std::vector<double> x) {
  double n = 0;
  for (double e : x) n += e * e;
  n = std::max(std::sqrt(n), 1e-12);
  for (double& e : x) e /= n;
  return x;
}

// One power iteration from u (v = W^T u, u = W v, each normalised), and u^T W v: what a
// training-mode forward computes.
struct PowerStep {
  std::vector<double> u, v;
  double sigma = 0;
};
PowerStep power_step(const Matrix& w, const std::vector<double>& u0) {
  const size_t h = w.size(), m = w[0].size();
  PowerStep s;
  s.v.assign(m, 0.0);
  for (size_t j = 0; j < m; ++j)
    for (size_t i = 0; i < h; ++i) s.v[j] += w[i][j] * u0[i];
  s.v = unit(s.v);
  s.u.assign(h, 0.0);
  for (size_t i = 0; i < h; ++i)
    for (size_t j = 0; j < m; ++j) s.u[i] += w[i][j] * s.v[j];
  s.u = unit(s.u);
  for (size_t i = 0; i < h; ++i)
    for (size_t j = 0; j < m; ++j) s.sigma += s.u[i] * w[i][j] * s.v[j];
  return s;
}

// The largest singular value: sqrt of W^T W's largest eigenvalue by 5000 power steps.
double largest_singular_value(const Matrix& w) {
  const size_t h = w.size(), m = w[0].size();
  std::vector<double> x(m, 1.0);
  double lambda = 0;
  for (int it = 0; it < 5000; ++it) {
    std::vector<double> wx(h, 0.0), y(m, 0.0);
    for (size_t i = 0; i < h; ++i)
      for (size_t j = 0; j < m; ++j) wx[i] += w[i][j] * x[j];
    for (size_t j = 0; j < m; ++j)
      for (size_t i = 0; i < h; ++i) y[j] += w[i][j] * wx[i];
    double n = 0;
    for (double e : y) n += e * e;
    lambda = std::sqrt(n);  // ||W^T W x|| with ||x|| = 1
    x = unit(y);
  }
  return std::sqrt(lambda);
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(got[i] == Approx(want[i]).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("spectral_sigma after power iteration is the largest singular value", "[nn][spectral_norm]") {
  // Rank one, a b^T: sigma = |a| |b| after a single step from any u not orthogonal to a.
  const std::vector<double> a{1, -2, 2}, b{3, 0, 4, 0};
  std::vector<double> rank_one;
  for (double x : a)
    for (double y : b) rank_one.push_back(x * y);
  const Tensor w1 = Tensor::from_values({3, 4}, rank_one, DType::f64);
  Tensor u = Tensor::from_values({3}, {0.6, 0.0, 0.8}, DType::f64), v = Tensor::zeros({4}, DType::f64);
  nn::power_iteration(w1, u, v, 1);
  CHECK(nn::spectral_sigma(Variable(w1), u, v).item() == Approx(3.0 * 5.0).epsilon(1e-14));
  // A random [5, 3]: many iterations converge to the direct loop's value.
  const Tensor w2 = random_input({5, 3}, 401).data();
  Tensor u2 = random_input({5}, 402).data(), v2 = Tensor::zeros({3}, DType::f64);
  nn::power_iteration(w2, u2, v2, 500);
  CHECK(nn::spectral_sigma(Variable(w2), u2, v2).item() ==
        Approx(largest_singular_value(rows_of(w2, 5))).epsilon(1e-10));
}

TEST_CASE("SpectralNorm(Linear): one power iteration per training forward, then W / sigma",
          "[nn][spectral_norm]") {
  Generator gen(5);
  auto linear_layer = std::make_shared<nn::Linear>(4, 3, true, gen);
  nn::SpectralNorm sn(linear_layer, {}, gen);
  CHECK(sn.named_buffers().size() == 2);
  CHECK(sn.named_parameters()[0].first == "layer.weight");
  const Tensor u = sn.named_buffers()[0].second;  // a handle on the buffer's storage
  REQUIRE(u.shape() == Shape{3});
  REQUIRE(sn.named_buffers()[1].second.shape() == Shape{4});
  double u_norm = 0;
  for (double e : u.to_vector()) u_norm += e * e;
  CHECK(u_norm == Approx(1.0).epsilon(1e-6));  // drawn, then normalised

  const Matrix w = rows_of(linear_layer->weight.data(), 3);
  const std::vector<double> bias = linear_layer->bias.data().to_vector();
  const Variable x = Variable(random_input({2, 4}, 403).data().to(DType::f32));
  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const PowerStep want = power_step(w, u.to_vector());
    const std::vector<double> y = sn(x).data().to_vector();
    check_close(u.to_vector(), want.u, 1e-5);
    check_close(sn.named_buffers()[1].second.to_vector(), want.v, 1e-5);
    std::vector<double> y_want;
    const std::vector<double> xv = x.data().to_vector();
    for (int n = 0; n < 2; ++n)
      for (int o = 0; o < 3; ++o) {
        double s = bias[size_t(o)];
        for (int i = 0; i < 4; ++i) s += xv[size_t(n * 4 + i)] * w[size_t(o)][size_t(i)] / want.sigma;
        y_want.push_back(s);
      }
    check_close(y, y_want, 1e-5);
  }
}

TEST_CASE("SpectralNorm in eval mode leaves u and v alone and uses them", "[nn][spectral_norm]") {
  Generator gen(6);
  auto conv = std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1, true, gen);
  nn::SpectralNorm sn(conv, {}, gen);
  const Variable x = Variable(random_input({1, 2, 4, 4}, 404).data().to(DType::f32));
  sn(x);  // one training step moves u
  sn.eval();
  const Tensor u_before = sn.named_buffers()[0].second.clone(),
               v_before = sn.named_buffers()[1].second.clone();
  const Variable y = sn(x);
  CHECK(sn.named_buffers()[0].second.to_vector() == u_before.to_vector());
  CHECK(sn.named_buffers()[1].second.to_vector() == v_before.to_vector());
  // sigma = u^T W v from the stored vectors, W [out, in * k * k].
  const Matrix w = rows_of(conv->weight.data(), 3);
  const std::vector<double> uv = u_before.to_vector(), vv = v_before.to_vector();
  double sigma = 0;
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < w[0].size(); ++j) sigma += uv[i] * w[i][j] * vv[j];
  const Variable want = conv2d(x, scale(conv->weight, 1.0 / sigma), conv->bias, conv->params);
  check_close(y.data().to_vector(), want.data().to_vector(), 1e-5);
  // The weight's gradient goes through sigma too: that of the composition W / sigma(W),
  // whose gradient the gradchecks below verify.
  const Tensor r = random_input(y.shape(), 405).data().to(DType::f32);
  sum(mul(sn(x), Variable(r))).backward();
  const Tensor got_grad = conv->weight.grad().clone();
  const Variable w_leaf(conv->weight.data(), true);
  const Variable sigma_w = nn::spectral_sigma(nn::spectral_weight_matrix(w_leaf, 0), u_before, v_before);
  sum(mul(conv2d(x, div(w_leaf, reshape(sigma_w, {1, 1, 1, 1})), conv->bias, conv->params), Variable(r)))
      .backward();
  check_close(got_grad.to_vector(), w_leaf.grad().to_vector(), 1e-5);
  sn.train();
  sn(x);
  CHECK(sn.named_buffers()[0].second.to_vector() != u_before.to_vector());
}

TEST_CASE("spectral_weight_matrix: [out, -1] with out along axis 0, or axis 1 for ConvTranspose2d",
          "[nn][spectral_norm]") {
  const Variable w = random_input({2, 3, 2, 2}, 405);  // ConvTranspose2d's [in, out, k, k]
  const std::vector<double> wv = w.data().to_vector();
  const Variable m1 = nn::spectral_weight_matrix(w, 1);
  REQUIRE(m1.shape() == Shape{3, 8});
  std::vector<double> want;
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 2; ++i)
      for (int p = 0; p < 4; ++p) want.push_back(wv[size_t((i * 3 + o) * 4 + p)]);
  CHECK(m1.data().to_vector() == want);
  CHECK(nn::spectral_weight_matrix(w, 0).shape() == Shape{2, 12});
  CHECK(nn::spectral_weight_matrix(w, 0).data().to_vector() == wv);
  // SpectralNorm(ConvTranspose2d) normalises over that matrix: u is [out].
  Generator gen(7);
  nn::SpectralNorm sn(std::make_shared<nn::ConvTranspose2d>(2, 3, 3, 2, 1, 1, true, gen), {}, gen);
  CHECK(sn.named_buffers()[0].second.shape() == Shape{3});
  CHECK(sn.named_buffers()[1].second.shape() == Shape{18});
  CHECK(sn(Variable(Tensor::ones({1, 2, 3, 3}))).shape() == Shape{1, 3, 6, 6});
}

TEST_CASE("gradcheck: W / sigma with u and v constants", "[gradcheck][nn][spectral_norm]") {
  const Tensor u = random_input({3}, 406).data(), v = random_input({4}, 407).data();
  expect_gradients_match(
      "W / sigma(W)",
      [&](const std::vector<Variable>& p) { return div(p[0], nn::spectral_sigma(p[0], u, v)); },
      {random_input({3, 4}, 408)});
  // ConvTranspose2d's layout: the matrix is a permute of the weight.
  const Tensor v8 = random_input({8}, 409).data();
  expect_gradients_match(
      "W / sigma(W) of a [in, out, k, k] weight",
      [&](const std::vector<Variable>& p) {
        return div(p[0],
                   reshape(nn::spectral_sigma(nn::spectral_weight_matrix(p[0], 1), u, v8), {1, 1, 1, 1}));
      },
      {random_input({2, 3, 2, 2}, 410)});
}

TEST_CASE("SpectralNorm errors name the layer and the shapes", "[nn][spectral_norm][errors]") {
  CHECK_THROWS_WITH(nn::SpectralNorm(std::make_shared<nn::Tanh>()),
                    Catch::Contains("SpectralNorm: wraps Linear, Conv2d or ConvTranspose2d, not Tanh"));
  CHECK_THROWS_WITH(nn::SpectralNorm(std::make_shared<nn::Linear>(2, 2), {.power_iterations = -1}),
                    Catch::Contains("power_iterations must be >= 0"));
  Tensor u = Tensor::zeros({3}, DType::f64), v = Tensor::zeros({2}, DType::f64);
  CHECK_THROWS_WITH(nn::power_iteration(Tensor::zeros({3, 4}, DType::f64), u, v, 1),
                    Catch::Contains("power_iteration: u [3] and v [2] do not fit the weight matrix [3, 4]"));
  CHECK_THROWS_WITH(nn::spectral_sigma(Variable(Tensor::zeros({2, 4}, DType::f64)), u, v),
                    Catch::Contains("spectral_sigma: u [3] and v [2] do not fit the weight matrix [2, 4]"));
}
