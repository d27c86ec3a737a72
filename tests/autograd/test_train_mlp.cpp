// End to end: a small MLP learns a generated regression task with Adam, deterministically.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"

using namespace tandem;

namespace {

struct Task {
  Variable x, y;  // [256, 2], [256, 1]
};

// y = sin(x0) + x1^2 / 2 on 256 points drawn uniformly from [-2, 2]^2.
Task make_task(uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty({256, 2});
  fill_uniform(x, -2.0, 2.0, gen);
  std::vector<double> y(256);
  for (int64_t i = 0; i < 256; ++i) y[i] = std::sin(x.at(2 * i)) + 0.5 * x.at(2 * i + 1) * x.at(2 * i + 1);
  return {Variable(x), tensor({256, 1}, y)};
}

double variance(const Tensor& t) {
  auto v = t.to_vector();
  double m = 0, s = 0;
  for (double a : v) m += a;
  m /= static_cast<double>(v.size());
  for (double a : v) s += (a - m) * (a - m);
  return s / static_cast<double>(v.size());
}

struct Result {
  double initial, final;
};

Result train(const Task& task, int steps) {
  Generator init_gen(7);
  auto net = std::make_shared<nn::Sequential>(
      std::make_shared<nn::Linear>(2, 16, true, init_gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 16, true, init_gen), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 1, true, init_gen));
  optim::Adam opt(net->parameters(), {.lr = 1e-2});
  auto mse = [&] { return mean(square(net->forward(task.x) - task.y)); };
  Result r{0.0, 0.0};
  for (int step = 0; step < steps; ++step) {
    opt.zero_grad();
    Variable loss = mse();
    if (step == 0) r.initial = loss.item();
    loss.backward();
    opt.step();
  }
  r.final = mse().item();
  return r;
}

}  // namespace

// Full-batch Adam (lr 1e-2) on 256 points. Measured curve (MSE): step 0: 1.337, 50: 0.35,
// 100: 0.030, 150: 0.0088, 200: 0.0037, 250: 0.0018, 300: 0.00091 (0.1 s). var(y) = 1.02, so
// the threshold 3e-3 is ~400x below both the initial loss and the variance of y (a model
// predicting the mean scores 1.02), with 3x headroom over the measured final loss; over 32
// other (task seed, init seed) pairs the final loss stayed within 4.7e-4 .. 1.2e-3.
TEST_CASE("a 2-16-16-1 tanh MLP fits a regression task with Adam", "[train]") {
  const Task task = make_task(2024);
  const double var_y = variance(task.y.data());
  const Result r = train(task, 300);
  INFO("var(y) " << var_y << ", initial MSE " << r.initial << ", final MSE " << r.final);
  CHECK(var_y > 0.9);
  CHECK(r.initial > 1.0);
  CHECK(r.final < 3e-3);
  // Deterministic: the same seeds give bit-identical training.
  const Result again = train(task, 300);
  CHECK(again.initial == r.initial);
  CHECK(again.final == r.final);
}
