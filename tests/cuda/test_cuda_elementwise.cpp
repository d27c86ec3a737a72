// The CUDA elementwise, activation and loss kernels against their CPU twins: the same
// random data through both, in float32 and float64, at sizes that leave a partial block
// (1, 7, 1000003 elements) and with NCHW-like shapes for the per-channel ops.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/activation.h"
#include "kernels/bias_activation.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "kernels/sign_class.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64};
const Shape kShapes[] = {{1}, {7}, {1000003}, {3, 5, 7, 9}};

uint64_t fresh_seed() {
  static uint64_t next = 0xE1E0000;
  return ++next;
}

// Nonzero multiples of 1/64 in [-1, 1]: their sums are exact in float32 as well, so the
// CPU's float accumulation adds no error and a dropped or doubled term shows.
Tensor random_grid(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> v = random_cpu(shape, DType::f64, seed).to_vector();
  for (double& e : v) e = e < 0 ? std::floor(e * 64) / 64 : std::max(std::ceil(e * 64), 1.0) / 64;
  return Tensor::from_values(shape, v, dtype);
}

std::string label(const std::string& op, DType dtype, const Shape& shape) {
  return op + " " + dtype_name(dtype) + shape_str(shape);
}

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

// Inputs uniform in [lo, hi).
void check_unary(const std::string& op, const Unary& f, double lo, double hi) {
  for (DType dt : kFloatTypes)
    for (const Shape& shape : kShapes) {
      Tensor x = random_cpu(shape, dt, fresh_seed(), lo, hi);
      require_close(f(on_gpu(x)), f(x), label(op, dt, shape));
    }
}

// First operand in [lo_a, hi_a), second in [lo_b, hi_b).
void check_binary(const std::string& op, const Binary& f, double lo_a, double hi_a, double lo_b,
                  double hi_b) {
  for (DType dt : kFloatTypes)
    for (const Shape& shape : kShapes) {
      Tensor a = random_cpu(shape, dt, fresh_seed(), lo_a, hi_a);
      Tensor b = random_cpu(shape, dt, fresh_seed(), lo_b, hi_b);
      require_close(f(on_gpu(a), on_gpu(b)), f(a, b), label(op, dt, shape));
    }
}

}  // namespace

TEST_CASE("cuda elementwise: binary arithmetic matches the CPU") {
  check_binary(
      "add", [](const Tensor& a, const Tensor& b) { return kernels::add(a, b); }, -1, 1, -1, 1);
  check_binary(
      "sub", [](const Tensor& a, const Tensor& b) { return kernels::sub(a, b); }, -1, 1, -1, 1);
  check_binary(
      "mul", [](const Tensor& a, const Tensor& b) { return kernels::mul(a, b); }, -2, 2, -2, 2);
  check_binary(
      "div", [](const Tensor& a, const Tensor& b) { return kernels::div(a, b); }, -2, 2, 0.5, 2);
}

TEST_CASE("cuda elementwise: unary arithmetic and math functions match the CPU") {
  check_unary(
      "neg", [](const Tensor& a) { return kernels::neg(a); }, -1, 1);
  check_unary(
      "square", [](const Tensor& a) { return kernels::square(a); }, -3, 3);
  check_unary(
      "sqrt", [](const Tensor& a) { return kernels::sqrt(a); }, 0.01, 9);
  check_unary(
      "exp", [](const Tensor& a) { return kernels::exp(a); }, -6, 6);
  check_unary(
      "log", [](const Tensor& a) { return kernels::log(a); }, 0.01, 50);
  check_unary(
      "scale", [](const Tensor& a) { return kernels::scale(a, -0.37); }, -1, 1);
  check_unary(
      "add_scalar", [](const Tensor& a) { return kernels::add_scalar(a, 2.5); }, -1, 1);
}

TEST_CASE("cuda elementwise: abs, sign, pow, clamp, maximum, minimum, compare and where match the CPU") {
  check_unary(
      "abs", [](const Tensor& a) { return kernels::abs(a); }, -2, 2);
  check_unary(
      "sign", [](const Tensor& a) { return kernels::sign(a); }, -2, 2);
  check_unary(
      "pow 2.5", [](const Tensor& a) { return kernels::pow_scalar(a, 2.5); }, 0.01, 4);
  check_unary(
      "pow -3", [](const Tensor& a) { return kernels::pow_scalar(a, -3.0); }, -3, -0.2);
  check_unary(
      "clamp", [](const Tensor& a) { return kernels::clamp(a, -0.5, 0.25); }, -1, 1);
  check_unary(
      "clamp_mask", [](const Tensor& a) { return kernels::clamp_mask(a, -0.5, 0.25); }, -1, 1);
  check_binary(
      "maximum", [](const Tensor& a, const Tensor& b) { return kernels::maximum(a, b); }, -1, 1, -1, 1);
  check_binary(
      "minimum", [](const Tensor& a, const Tensor& b) { return kernels::minimum(a, b); }, -1, 1, -1, 1);
  for (auto op : {kernels::Comparison::greater, kernels::Comparison::less_equal}) {
    check_binary(
        "compare", [op](const Tensor& a, const Tensor& b) { return kernels::compare(a, b, op); }, -1, 1, -1,
        1);
  }
  check_binary(
      "where",
      [](const Tensor& a, const Tensor& b) {
        return kernels::where(kernels::compare(a, b, kernels::Comparison::greater), kernels::square(a), b);
      },
      -1, 1, -1, 1);
  // NaN propagates alike; broadcasting takes the same path on both devices.
  const double nan = std::nan("");
  Tensor x = Tensor::from_values({4}, {nan, -1.0, 0.0, 2.0}, DType::f32);
  Tensor y = Tensor::from_values({4}, {0.0, nan, 0.0, 1.0}, DType::f32);
  for (const auto& [op, f] : std::vector<std::pair<std::string, Binary>>{
           {"maximum", [](const Tensor&a, const Tensor&b) { return kernels::maximum(a, b); }},
           {"minimum", [](const Tensor&a, const Tensor&b) { return kernels::minimum(a, b); }}}) {
    const std::vector<double> cpu = f(x, y).to_vector(), gpu = f(on_gpu(x), on_gpu(y)).to_vector();
    for (size_t i = 0; i < cpu.size(); ++i) {
      INFO(op << " [" << i << "]");
      CHECK((std::isnan(cpu[i]) ? std::isnan(gpu[i]) : gpu[i] == cpu[i]));
    }
  }
  Tensor rows = random_cpu({3, 4}, DType::f64, fresh_seed()), row = random_cpu({4}, DType::f64, fresh_seed());
  require_close(kernels::maximum(on_gpu(rows), on_gpu(row)), kernels::maximum(rows, row),
                "maximum broadcast");
}

TEST_CASE("cuda elementwise: in-place scale_, axpy_ and add_ update the tensor as on the CPU") {
  for (DType dt : kFloatTypes)
    for (const Shape& shape : kShapes) {
      Tensor y = random_cpu(shape, dt, fresh_seed());
      Tensor x = random_cpu(shape, dt, fresh_seed());
      Tensor y_gpu = on_gpu(y), x_gpu = on_gpu(x);

      kernels::scale_(y, 1.7);
      kernels::scale_(y_gpu, 1.7);
      require_close(y_gpu, y, label("scale_", dt, shape));

      kernels::axpy_(y, -0.61, x);
      kernels::axpy_(y_gpu, -0.61, x_gpu);
      require_close(y_gpu, y, label("axpy_", dt, shape));

      kernels::add_(y, x);
      kernels::add_(y_gpu, x_gpu);
      require_close(y_gpu, y, label("add_", dt, shape));
      require_close(x_gpu, x, label("add_ source untouched", dt, shape));
    }
}

TEST_CASE("cuda elementwise: add_bias and bias_grad match the CPU per channel") {
  // [N, C] (inner 1), NCHW, few long channels, and one-element cases.
  const Shape shapes[] = {{5, 7},          {64, 256},      {4099, 3}, {3, 5, 7, 9},
                          {64, 128, 4, 4}, {300, 2, 1001}, {1, 1},    {1, 3, 1}};
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes) {
      Tensor x = random_cpu(shape, dt, fresh_seed());
      Tensor bias = random_cpu({shape[1]}, dt, fresh_seed());
      require_close(kernels::add_bias(on_gpu(x), on_gpu(bias)), kernels::add_bias(x, bias),
                    label("add_bias", dt, shape));
      Tensor grad = random_grid(shape, dt, fresh_seed());
      require_close(kernels::bias_grad(on_gpu(grad)), kernels::bias_grad(grad),
                    label("bias_grad", dt, shape));
    }
}

TEST_CASE("cuda bias_activation: forward, grad_x and grad_bias match the CPU twin") {
  using kernels::Activation;
  const Shape shapes[] = {{5, 7}, {64, 256}, {3, 5, 7, 9}, {64, 128, 4, 4}, {300, 2, 1001}, {1, 1}};
  for (DType dt : kFloatTypes)
    for (const Shape& shape : shapes)
      for (Activation act : {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh,
                             Activation::sigmoid}) {
        const std::string what =
            label(std::string("bias_activation ") + kernels::activation_name(act), dt, shape);
        Tensor x = random_cpu(shape, dt, fresh_seed(), -2, 2);
        Tensor bias = random_cpu({shape[1]}, dt, fresh_seed());
        Tensor y = kernels::bias_activation(x, bias, act, 0.2);
        Tensor y_gpu = kernels::bias_activation(on_gpu(x), on_gpu(bias), act, 0.2);
        require_close(y_gpu, y, what + " forward");
        Tensor grad = random_grid(shape, dt, fresh_seed());
        // Both backwards from the CPU's output, so only the backward kernels differ.
        kernels::BiasActivationGrads cpu = kernels::bias_activation_backward(grad, y, act, 0.2);
        kernels::BiasActivationGrads gpu =
            kernels::bias_activation_backward(on_gpu(grad), on_gpu(y), act, 0.2);
        require_close(gpu.x, cpu.x, what + " grad_x");
        require_close(gpu.bias, cpu.bias, what + " grad_bias");
      }
}

TEST_CASE("cuda bias_activation with StyleGAN's gain and clamp matches the CPU twin") {
  using kernels::Activation;
  const Shape shape{8, 16, 5, 7};
  for (DType dt : kFloatTypes)
    for (Activation act : {Activation::none, Activation::relu, Activation::leaky_relu, Activation::tanh,
                           Activation::sigmoid}) {
      const std::string what =
          label(std::string("bias_activation gain clamp ") + kernels::activation_name(act), dt, shape);
      Tensor x = random_cpu(shape, dt, fresh_seed(), -2, 2);
      Tensor bias = random_cpu({shape[1]}, dt, fresh_seed());
      Tensor y = kernels::bias_activation(x, bias, act, 0.2, 1.7, 0.9);
      require_close(kernels::bias_activation(on_gpu(x), on_gpu(bias), act, 0.2, 1.7, 0.9), y,
                    what + " forward");
      Tensor grad = random_grid(shape, dt, fresh_seed());
      kernels::BiasActivationGrads cpu = kernels::bias_activation_backward(grad, y, act, 0.2, 1.7, 0.9);
      kernels::BiasActivationGrads gpu =
          kernels::bias_activation_backward(on_gpu(grad), on_gpu(y), act, 0.2, 1.7, 0.9);
      require_close(gpu.x, cpu.x, what + " grad_x");
      require_close(gpu.bias, cpu.bias, what + " grad_bias");
    }
}

TEST_CASE("cuda activations: forward and backward match the CPU") {
  // Inputs on both sides of 0 so the sign branches of sigmoid and softplus both run.
  check_unary(
      "relu", [](const Tensor& x) { return kernels::relu(x); }, -2, 2);
  check_unary(
      "leaky_relu", [](const Tensor& x) { return kernels::leaky_relu(x, 0.2); }, -2, 2);
  check_unary(
      "tanh", [](const Tensor& x) { return kernels::tanh(x); }, -4, 4);
  check_unary(
      "sigmoid", [](const Tensor& x) { return kernels::sigmoid(x); }, -20, 20);
  check_unary(
      "softplus", [](const Tensor& x) { return kernels::softplus(x); }, -20, 20);
  check_binary(
      "relu_backward", [](const Tensor& g, const Tensor& x) { return kernels::relu_backward(g, x); }, -1, 1,
      -2, 2);
  check_binary(
      "leaky_relu_backward",
      [](const Tensor& g, const Tensor& x) { return kernels::leaky_relu_backward(g, x, 0.2); }, -1, 1, -2, 2);
  check_binary(
      "tanh_backward", [](const Tensor& g, const Tensor& y) { return kernels::tanh_backward(g, y); }, -1, 1,
      -1, 1);
  check_binary(
      "sigmoid_backward", [](const Tensor& g, const Tensor& y) { return kernels::sigmoid_backward(g, y); },
      -1, 1, 0, 1);
  check_binary(
      "softplus_backward", [](const Tensor& g, const Tensor& x) { return kernels::softplus_backward(g, x); },
      -1, 1, -20, 20);
}

TEST_CASE("cuda relu and leaky_relu keep NaN and Inf as the CPU does") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::from_values({3}, {std::nan(""), -INFINITY, INFINITY}, dt);
    Tensor g = Tensor::from_values({3}, {1.0, 2.0, 3.0}, dt);
    const std::vector<std::pair<Tensor, Tensor>> pairs = {
        {kernels::relu(on_gpu(x)), kernels::relu(x)},
        {kernels::relu_backward(on_gpu(g), on_gpu(x)), kernels::relu_backward(g, x)},
        {kernels::leaky_relu(on_gpu(x), 0.2), kernels::leaky_relu(x, 0.2)},
        {kernels::leaky_relu_backward(on_gpu(g), on_gpu(x), 0.2), kernels::leaky_relu_backward(g, x, 0.2)}};
    for (const auto& [gpu, cpu] : pairs) {
      std::vector<double> a = gpu.to(Device::cpu()).to_vector(), b = cpu.to_vector();
      for (size_t i = 0; i < a.size(); ++i) {
        INFO(dtype_name(dt) << " element " << i << ": " << a[i] << " vs " << b[i]);
        CHECK((std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i]));
      }
    }
  }
}

TEST_CASE("cuda sign_class and the backwards that read it match the CPU") {
  using kernels::Activation;
  for (DType dt : kFloatTypes) {
    // Edge values, then random ones: [2, 3, 4].
    std::vector<double> v = {0.0,       -0.0,         1e-300, -1e-300, 1e-40, INFINITY,
                             -INFINITY, std::nan(""), 2.0,    -3.0,    1.0,   -1.0};
    for (double e : random_cpu({12}, DType::f64, fresh_seed()).to_vector()) v.push_back(e);
    const Tensor x = Tensor::from_values({2, 3, 4}, v, dt);
    const Tensor g = random_grid({2, 3, 4}, dt, fresh_seed());
    const Tensor c = kernels::sign_class(x), c_gpu = kernels::sign_class(on_gpu(x));
    CHECK(c_gpu.dtype() == DType::u8);
    CHECK(c_gpu.to(Device::cpu()).to_vector() == c.to_vector());
    const std::vector<std::pair<Tensor, Tensor>> pairs = {
        {kernels::relu_backward(on_gpu(g), c_gpu), kernels::relu_backward(g, x)},
        {kernels::leaky_relu_backward(on_gpu(g), c_gpu, 0.2), kernels::leaky_relu_backward(g, x, 0.2)},
        {kernels::bias_activation_backward(on_gpu(g), c_gpu, Activation::leaky_relu, 0.2).x,
         kernels::bias_activation_backward(g, x, Activation::leaky_relu, 0.2).x}};
    for (const auto& [gpu, cpu] : pairs) {
      std::vector<double> a = gpu.to(Device::cpu()).to_vector(), b = cpu.to_vector();
      for (size_t i = 0; i < a.size(); ++i) {
        INFO(dtype_name(dt) << " element " << i << ": " << a[i] << " vs " << b[i]);
        CHECK((std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i]));
      }
    }
    CHECK_THROWS_WITH(kernels::bias_activation_backward(on_gpu(g), c_gpu, Activation::tanh),
                      Catch::Contains("sign class stands for it only for relu and leaky_relu"));
  }
}

TEST_CASE("cuda loss: bce_with_logits and its backward match the CPU") {
  for (DType dt : kFloatTypes)
    for (const Shape& shape : kShapes) {
      Tensor logits = random_cpu(shape, dt, fresh_seed(), -30, 30);
      Tensor targets = random_cpu(shape, dt, fresh_seed(), 0, 1);
      Tensor grad = random_cpu(shape, dt, fresh_seed());
      require_close(kernels::bce_with_logits(on_gpu(logits), on_gpu(targets)),
                    kernels::bce_with_logits(logits, targets), label("bce_with_logits", dt, shape));
      require_close(kernels::bce_with_logits_backward(on_gpu(grad), on_gpu(logits), on_gpu(targets)),
                    kernels::bce_with_logits_backward(grad, logits, targets),
                    label("bce_with_logits_backward", dt, shape));
    }
}

TEST_CASE("cuda elementwise: a CPU operand next to a GPU one is an error naming the op and both tensors") {
  Tensor a = random_cpu({4, 3}, DType::f32, fresh_seed());
  Tensor b = random_cpu({4, 3}, DType::f32, fresh_seed());
  Tensor bias = random_cpu({3}, DType::f32, fresh_seed());
  Tensor a_gpu = on_gpu(a), b_gpu = on_gpu(b);
  require_device_mismatch("add", [&] { kernels::add(a_gpu, b); });
  require_device_mismatch("add", [&] { kernels::add(a, b_gpu); });
  require_device_mismatch("div", [&] { kernels::div(a_gpu, b); });
  require_device_mismatch("axpy_", [&] { kernels::axpy_(a_gpu, 2.0, b); });
  require_device_mismatch("add_", [&] { kernels::add_(a, b_gpu); });
  require_device_mismatch("add_bias", [&] { kernels::add_bias(a_gpu, bias); });
  require_device_mismatch("relu_backward", [&] { kernels::relu_backward(a_gpu, b); });
  require_device_mismatch("softplus_backward", [&] { kernels::softplus_backward(a, b_gpu); });
  require_device_mismatch("bce_with_logits", [&] { kernels::bce_with_logits(a_gpu, b); });
  require_device_mismatch("bce_with_logits_backward",
                          [&] { kernels::bce_with_logits_backward(a, b_gpu, b_gpu); });
  require_device_mismatch("bce_with_logits_backward",
                          [&] { kernels::bce_with_logits_backward(a_gpu, b, b); });
}

TEST_CASE("cuda elementwise: bad GPU input gets the CPU kernels' named errors") {
  Tensor a = on_gpu(random_cpu({4, 3}, DType::f32, fresh_seed()));
  Tensor b = on_gpu(random_cpu({3, 4}, DType::f32, fresh_seed()));
  Tensor c = on_gpu(random_cpu({4, 3}, DType::f64, fresh_seed()));
  CHECK_THROWS_WITH(kernels::add(a, b), Catch::Contains("add: shapes [4, 3] and [3, 4] do not broadcast"));
  CHECK_THROWS_WITH(kernels::mul(a, c), Catch::Contains("mul: dtype mismatch"));
  CHECK_THROWS_WITH(kernels::add_bias(a, on_gpu(random_cpu({4}, DType::f32, fresh_seed()))),
                    Catch::Contains("add_bias: bias [4] does not match channels"));
  CHECK_THROWS_WITH(kernels::bias_grad(on_gpu(random_cpu({5}, DType::f32, fresh_seed()))),
                    Catch::Contains("bias_grad: needs [N, C, ...]"));
  CHECK_THROWS_WITH(kernels::relu(on_gpu(random_cpu({4}, DType::f16, fresh_seed()))),
                    Catch::Contains("relu: dtype float16 is not supported"));
}
