// Finite-difference gradient checks (float64) for convolution, batch norm and resampling.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"

using namespace tandem;
using kernels::Conv2dParams;

namespace {

constexpr double kTolerance = 1e-6;

void require_close(const GradcheckResult& r) {
  INFO(r.report);
  CHECK(r.max_relative_error < kTolerance);
}

}  // namespace

TEST_CASE("gradcheck conv2d: input, weight and bias", "[gradcheck][conv]") {
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  const std::vector<Case> cases = {
      {{2, 2, 5, 4}, {3, 2, 3, 3}, {1, 1, 0}},
      {{2, 2, 6, 5}, {2, 2, 4, 4}, {2, 1, 0}},
      {{1, 3, 5, 5}, {2, 3, 3, 3}, {2, 0, 0}},
  };
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.x), shape_str(c.w), c.p.stride, c.p.padding);
    Variable x = random_input(c.x, 1), w = random_input(c.w, 2), b = random_input({c.w[0]}, 3);
    require_close(gradcheck([&](const std::vector<Variable>& in) { return conv2d(in[0], in[1], in[2], c.p); },
                            {x, w, b}));
  }
  // Without a bias.
  Variable x = random_input({2, 1, 4, 4}, 4), w = random_input({2, 1, 3, 3}, 5);
  require_close(gradcheck(
      [](const std::vector<Variable>& in) {
        return conv2d(in[0], in[1], Variable(), {1, 1, 0});
      },
      {x, w}));
}

TEST_CASE("gradcheck conv_transpose2d: input, weight and bias", "[gradcheck][conv]") {
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  const std::vector<Case> cases = {
      {{2, 2, 3, 4}, {2, 3, 3, 3}, {1, 1, 0}},
      {{2, 3, 3, 3}, {3, 2, 4, 4}, {2, 1, 0}},
      {{1, 2, 3, 2}, {2, 2, 3, 3}, {2, 1, 1}},
  };
  for (const Case& c : cases) {
    CAPTURE(shape_str(c.x), shape_str(c.w), c.p.stride, c.p.padding, c.p.output_padding);
    Variable x = random_input(c.x, 6), w = random_input(c.w, 7), b = random_input({c.w[1]}, 8);
    require_close(
        gradcheck([&](const std::vector<Variable>& in) { return conv_transpose2d(in[0], in[1], in[2], c.p); },
                  {x, w, b}));
  }
}

TEST_CASE("gradcheck grouped and dilated conv2d and conv_transpose2d", "[gradcheck][conv][grouped]") {
  struct Case {
    Shape x, w;
    Conv2dParams p;
  };
  // conv2d weight [o, c / groups, k, k]: grouped, depthwise, dilated, all at once with stride 2.
  for (const Case& c :
       {Case{{2, 4, 5, 4}, {4, 2, 3, 3}, {.padding = 1, .groups = 2}},
        Case{{2, 3, 5, 5}, {3, 1, 3, 3}, {.padding = 1, .groups = 3}},
        Case{{1, 2, 6, 5}, {3, 2, 3, 3}, {.padding = 2, .dilation = 2}},
        Case{{2, 4, 7, 6}, {6, 2, 2, 2}, {.stride = 2, .padding = 1, .dilation = 2, .groups = 2}}}) {
    CAPTURE(shape_str(c.x), shape_str(c.w), c.p.stride, c.p.padding, c.p.dilation, c.p.groups);
    Variable x = random_input(c.x, 20), w = random_input(c.w, 21), b = random_input({c.w[0]}, 22);
    require_close(gradcheck([&](const std::vector<Variable>& in) { return conv2d(in[0], in[1], in[2], c.p); },
                            {x, w, b}));
  }
  // conv_transpose2d weight [c, o / groups, k, k], with output_padding.
  for (const Case& c :
       {Case{{2, 4, 3, 3}, {4, 3, 3, 3}, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2}},
        Case{{1, 3, 3, 4}, {3, 1, 3, 3}, {.padding = 1, .dilation = 2, .groups = 3}},
        Case{{2, 2, 3, 3}, {2, 2, 2, 2}, {.stride = 2, .padding = 1, .output_padding = 1, .dilation = 2}}}) {
    CAPTURE(shape_str(c.x), shape_str(c.w), c.p.stride, c.p.padding, c.p.output_padding, c.p.dilation,
            c.p.groups);
    Variable x = random_input(c.x, 23), w = random_input(c.w, 24),
             b = random_input({c.w[1] * c.p.groups}, 25);
    require_close(
        gradcheck([&](const std::vector<Variable>& in) { return conv_transpose2d(in[0], in[1], in[2], c.p); },
                  {x, w, b}));
  }
}

TEST_CASE("gradcheck batch_norm training on [N, C], [N, C, L] and [N, C, H, W]", "[gradcheck][norm]") {
  for (const Shape& shape : {Shape{5, 3}, Shape{3, 3, 4}, Shape{2, 3, 3, 2}}) {
    CAPTURE(shape_str(shape));
    Variable x = random_input(shape, 9), gamma = random_input({3}, 10), beta = random_input({3}, 11);
    Tensor running_mean = Tensor::zeros({3}, DType::f64), running_var = Tensor::ones({3}, DType::f64);
    require_close(gradcheck(
        [&](const std::vector<Variable>& in) {
          return batch_norm(in[0], in[1], in[2], running_mean, running_var, /*training=*/true);
        },
        {x, gamma, beta}));
    // Without affine parameters or running buffers.
    Tensor none_mean, none_var;
    require_close(gradcheck(
        [&](const std::vector<Variable>& in) {
          return batch_norm(in[0], Variable(), Variable(), none_mean, none_var, /*training=*/true);
        },
        {x}));
  }
}

TEST_CASE("gradcheck batch_norm eval mode", "[gradcheck][norm]") {
  for (const Shape& shape : {Shape{4, 3}, Shape{2, 3, 4}, Shape{2, 3, 2, 3}}) {
    CAPTURE(shape_str(shape));
    Variable x = random_input(shape, 12), gamma = random_input({3}, 13), beta = random_input({3}, 14);
    Tensor running_mean = Tensor::from_values({3}, {0.5, -1.0, 2.0}, DType::f64);
    Tensor running_var = Tensor::from_values({3}, {0.3, 2.0, 1.5}, DType::f64);
    require_close(gradcheck(
        [&](const std::vector<Variable>& in) {
          return batch_norm(in[0], in[1], in[2], running_mean, running_var, /*training=*/false);
        },
        {x, gamma, beta}));
    // Eval mode leaves the running statistics alone.
    CHECK(running_mean.to_vector() == std::vector<double>{0.5, -1.0, 2.0});
  }
  Tensor none;
  CHECK_THROWS_WITH(batch_norm(random_input({4, 3}, 15), Variable(), Variable(), none, none, false),
                    Catch::Contains("batch_norm") && Catch::Contains("running_mean"));
}

TEST_CASE("gradcheck upsample_nearest2x and avg_pool2x", "[gradcheck][pool]") {
  Variable x = random_input({2, 2, 3, 2}, 15);
  require_close(gradcheck([](const std::vector<Variable>& in) { return upsample_nearest2x(in[0]); }, {x}));
  Variable y = random_input({2, 2, 4, 6}, 16);
  require_close(gradcheck([](const std::vector<Variable>& in) { return avg_pool2x(in[0]); }, {y}));
}

TEST_CASE("a small conv net composes: conv, batch norm, pool, transposed conv", "[gradcheck][conv]") {
  Variable x = random_input({2, 1, 4, 4}, 17), w1 = random_input({2, 1, 3, 3}, 18);
  Variable w2 = random_input({2, 1, 4, 4}, 19), gamma = random_input({2}, 20), beta = random_input({2}, 21);
  Tensor running_mean = Tensor::zeros({2}, DType::f64), running_var = Tensor::ones({2}, DType::f64);
  require_close(gradcheck(
      [&](const std::vector<Variable>& in) {
        Variable h = conv2d(in[0], in[1], Variable(), {1, 1, 0});  // [2, 2, 4, 4]
        h = batch_norm(h, in[3], in[4], running_mean, running_var, true);
        h = avg_pool2x(h);                                                             // [2, 2, 2, 2]
        return upsample_nearest2x(conv_transpose2d(h, in[2], Variable(), {2, 1, 0}));  // [2, 1, 8, 8]
      },
      {x, w1, w2, gamma, beta}));
}

TEST_CASE("conv2d with mismatched channels names conv2d and both shapes", "[conv][errors]") {
  Variable x = randn({2, 3, 8, 8});
  Variable w = randn({4, 2, 3, 3}, true);
  CHECK_THROWS_WITH(conv2d(x, w, Variable(), {}), Catch::Contains("conv2d") &&
                                                      Catch::Contains("[2, 3, 8, 8]") &&
                                                      Catch::Contains("[4, 2, 3, 3]"));
}
