// Activation, loss and shape kernels against hand-computed values, in float32 and float64.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/activation.h"
#include "kernels/loss.h"
#include "kernels/shape_ops.h"

using namespace tandem;

namespace {

// Element-by-element comparison with a relative tolerance fitting the dtype. float32 gets an
// absolute margin too: e^-100 is a float32 subnormal with only a few significant bits.
void check_values(const Tensor& t, const std::vector<double>& expected) {
  std::vector<double> got = t.to_vector();
  REQUIRE(got.size() == expected.size());
  bool f32 = t.dtype() == DType::f32;
  double eps = f32 ? 1e-6 : 1e-12;
  double margin = f32 ? 1e-37 : 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(t.str() << " element " << i);
    CHECK(std::isfinite(got[i]));
    CHECK(got[i] == Approx(expected[i]).epsilon(eps).margin(margin));
  }
}

const DType kDtypes[] = {DType::f32, DType::f64};

}  // namespace

TEST_CASE("relu and leaky_relu forward and backward", "[kernels][activation]") {
  for (DType dt : kDtypes) {
    Tensor x = Tensor::from_values({2, 2}, {-2.0, -0.5, 0.0, 1.5}, dt);
    Tensor g = Tensor::from_values({2, 2}, {1.0, 2.0, 3.0, 4.0}, dt);
    check_values(kernels::relu(x), {0.0, 0.0, 0.0, 1.5});
    check_values(kernels::relu_backward(g, x), {0.0, 0.0, 0.0, 4.0});
    check_values(kernels::leaky_relu(x, 0.2), {-0.4, -0.1, 0.0, 1.5});
    check_values(kernels::leaky_relu_backward(g, x, 0.2), {0.2, 0.4, 0.6, 4.0});
    CHECK(kernels::relu(x).shape() == Shape{2, 2});
  }
}

TEST_CASE("relu and leaky_relu keep NaN and Inf: NaN in, NaN out, forward and backward",
          "[kernels][activation]") {
  const double nan = std::nan(""), inf = INFINITY;
  for (DType dt : kDtypes) {
    Tensor x = Tensor::from_values({3}, {nan, -inf, inf}, dt);
    Tensor g = Tensor::from_values({3}, {1.0, 2.0, 3.0}, dt);
    std::vector<double> relu = kernels::relu(x).to_vector();
    std::vector<double> relu_grad = kernels::relu_backward(g, x).to_vector();
    std::vector<double> leaky = kernels::leaky_relu(x, 0.2).to_vector();
    std::vector<double> leaky_grad = kernels::leaky_relu_backward(g, x, 0.2).to_vector();
    CHECK(std::isnan(relu[0]));
    CHECK(relu[1] == 0.0);
    CHECK(relu[2] == inf);
    CHECK(std::isnan(relu_grad[0]));  // a NaN input makes its gradient NaN, never 0
    CHECK(relu_grad[1] == 0.0);
    CHECK(relu_grad[2] == 3.0);
    CHECK(std::isnan(leaky[0]));
    CHECK(leaky[1] == -inf);
    CHECK(std::isnan(leaky_grad[0]));
    CHECK(leaky_grad[1] == Approx(0.4));
    CHECK(leaky_grad[2] == 3.0);
  }
}

TEST_CASE("tanh and sigmoid forward and backward", "[kernels][activation]") {
  for (DType dt : kDtypes) {
    Tensor x = Tensor::from_values({4}, {0.0, 1.0, -2.0, 100.0}, dt);
    // tanh(1) = 0.761594155955765, tanh(2) = 0.964027580075817
    Tensor y = kernels::tanh(x);
    check_values(y, {0.0, 0.761594155955765, -0.964027580075817, 1.0});
    Tensor g = Tensor::from_values({4}, {1.0, 2.0, 0.5, 1.0}, dt);
    check_values(kernels::tanh_backward(g, y), {1.0, 2.0 * (1 - 0.761594155955765 * 0.761594155955765),
                                                0.5 * (1 - 0.964027580075817 * 0.964027580075817), 0.0});

    // sigmoid(1) = 0.731058578630005, sigmoid(-2) = 0.119202922022118
    Tensor xs = Tensor::from_values({5}, {0.0, 1.0, -2.0, 100.0, -100.0}, dt);
    Tensor s = kernels::sigmoid(xs);
    check_values(s, {0.5, 0.731058578630005, 0.119202922022118, 1.0, 3.720075976020836e-44});
    Tensor gs = Tensor::from_values({5}, {1.0, 2.0, 0.5, 1.0, 1.0}, dt);
    Tensor ds = kernels::sigmoid_backward(gs, s);
    std::vector<double> d = ds.to_vector();
    CHECK(d[0] == Approx(0.25));
    CHECK(d[1] == Approx(2.0 * 0.731058578630005 * (1 - 0.731058578630005)));
    CHECK(d[2] == Approx(0.5 * 0.119202922022118 * (1 - 0.119202922022118)));
    CHECK(d[3] == 0.0);
    CHECK(std::isfinite(d[4]));
  }
}

TEST_CASE("softplus is exact at 0 and stays finite and exact at |x| = 100", "[kernels][activation]") {
  for (DType dt : kDtypes) {
    Tensor x = Tensor::from_values({6}, {0.0, 1.0, -1.0, 100.0, -100.0, 30.0}, dt);
    Tensor y = kernels::softplus(x);
    // log(1 + e) = 1.313261687518223, log(1 + 1/e) = 0.313261687518223,
    // softplus(-100) = log1p(e^-100) = 3.720075976020836e-44, softplus(30) = 30 + 9.357622968840175e-14.
    check_values(y, {0.693147180559945, 1.313261687518223, 0.313261687518223, 100.0, 3.720075976020836e-44,
                     30.000000000000094});
    // A naive log(1 + exp(100)) overflows float32; the stable form gives 100 exactly.
    CHECK(y.to_vector()[3] == 100.0);
    CHECK(y.to_vector()[4] > 0.0);

    Tensor g = Tensor::from_values({6}, {1.0, 2.0, 1.0, 1.0, 1.0, 1.0}, dt);
    check_values(kernels::softplus_backward(g, x),
                 {0.5, 2.0 * 0.731058578630005, 0.268941421369995, 1.0, 3.720075976020836e-44, 1.0});
  }
}

TEST_CASE("bce_with_logits matches the stable form, also at |x| = 100", "[kernels][loss]") {
  for (DType dt : kDtypes) {
    Tensor x = Tensor::from_values({6}, {0.0, 2.0, 100.0, 100.0, -100.0, -100.0}, dt);
    Tensor t = Tensor::from_values({6}, {1.0, 0.25, 1.0, 0.0, 1.0, 0.0}, dt);
    // x = 2, t = 0.25: 2 - 0.5 + log1p(e^-2) = 1.5 + 0.126928011042973
    check_values(kernels::bce_with_logits(x, t), {0.693147180559945, 1.626928011042973, 3.720075976020836e-44,
                                                  100.0, 100.0, 3.720075976020836e-44});
    Tensor g = Tensor::from_values({6}, {1.0, 2.0, 1.0, 1.0, 1.0, 1.0}, dt);
    // grad * (sigmoid(x) - t); sigmoid(2) = 0.880797077977882
    std::vector<double> d = kernels::bce_with_logits_backward(g, x, t).to_vector();
    CHECK(d[0] == Approx(-0.5));
    CHECK(d[1] == Approx(2.0 * (0.880797077977882 - 0.25)));
    CHECK(d[2] == Approx(0.0).margin(1e-30));
    CHECK(d[3] == Approx(1.0));
    CHECK(d[4] == Approx(-1.0));
    CHECK(d[5] == Approx(0.0).margin(1e-30));
    for (double v : d) CHECK(std::isfinite(v));
  }
}

TEST_CASE("bce_with_logits names the op and both shapes on a mismatch", "[kernels][loss][errors]") {
  Tensor x = Tensor::zeros({2, 3});
  Tensor t = Tensor::zeros({3, 2});
  CHECK_THROWS_WITH(kernels::bce_with_logits(x, t), Catch::Contains("bce_with_logits") &&
                                                        Catch::Contains("[2, 3]") &&
                                                        Catch::Contains("[3, 2]"));
}

TEST_CASE("concat along each axis", "[kernels][shape]") {
  for (DType dt : kDtypes) {
    Tensor a = Tensor::from_values({2, 2}, {1, 2, 3, 4}, dt);
    Tensor b = Tensor::from_values({1, 2}, {5, 6}, dt);
    Tensor c0 = kernels::concat({a, b}, 0);
    CHECK(c0.shape() == Shape{3, 2});
    check_values(c0, {1, 2, 3, 4, 5, 6});

    Tensor d = Tensor::from_values({2, 3}, {5, 6, 7, 8, 9, 10}, dt);
    Tensor c1 = kernels::concat({a, d}, 1);
    CHECK(c1.shape() == Shape{2, 5});
    check_values(c1, {1, 2, 5, 6, 7, 3, 4, 8, 9, 10});
    check_values(kernels::concat({a, d}, -1), {1, 2, 5, 6, 7, 3, 4, 8, 9, 10});

    // Innermost axis of a 3-D tensor: [2, 1, 2] ++ [2, 1, 1] -> [2, 1, 3].
    Tensor p = Tensor::from_values({2, 1, 2}, {1, 2, 3, 4}, dt);
    Tensor q = Tensor::from_values({2, 1, 1}, {9, 8}, dt);
    Tensor c2 = kernels::concat({p, q}, 2);
    CHECK(c2.shape() == Shape{2, 1, 3});
    check_values(c2, {1, 2, 9, 3, 4, 8});
  }
}

TEST_CASE("concat errors name the op and the shapes", "[kernels][shape][errors]") {
  Tensor a = Tensor::zeros({2, 3});
  Tensor b = Tensor::zeros({2, 4});
  CHECK_THROWS_WITH(kernels::concat({a, b}, 0),
                    Catch::Contains("concat") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_NOTHROW(kernels::concat({a, b}, 1));
  CHECK_THROWS_WITH(kernels::concat({a, Tensor::zeros({2, 3, 1})}, 1),
                    Catch::Contains("concat") && Catch::Contains("[2, 3, 1]"));
  CHECK_THROWS_WITH(kernels::concat({a, b}, 2), Catch::Contains("concat") && Catch::Contains("axis 2"));
  CHECK_THROWS_WITH(kernels::concat({a, Tensor::zeros({2, 3}, DType::f64)}, 0), Catch::Contains("concat"));
  CHECK_THROWS_WITH(kernels::concat({}, 0), Catch::Contains("concat"));
}

TEST_CASE("slice and slice_backward along each axis", "[kernels][shape]") {
  for (DType dt : kDtypes) {
    // x[i, j, k] = 100 i + 10 j + k, shape [2, 3, 2]
    Tensor x = Tensor::from_values({2, 3, 2}, {0, 1, 10, 11, 20, 21, 100, 101, 110, 111, 120, 121}, dt);
    Tensor s0 = kernels::slice(x, 0, 1, 1);
    CHECK(s0.shape() == Shape{1, 3, 2});
    check_values(s0, {100, 101, 110, 111, 120, 121});
    Tensor s1 = kernels::slice(x, 1, 1, 2);
    CHECK(s1.shape() == Shape{2, 2, 2});
    check_values(s1, {10, 11, 20, 21, 110, 111, 120, 121});
    Tensor s2 = kernels::slice(x, -1, 1, 1);
    CHECK(s2.shape() == Shape{2, 3, 1});
    check_values(s2, {1, 11, 21, 101, 111, 121});
    CHECK_FALSE(s1.shares_storage_with(x));

    Tensor g = Tensor::from_values({2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}, dt);
    Tensor back = kernels::slice_backward(g, {2, 3, 2}, 1, 1);
    CHECK(back.shape() == Shape{2, 3, 2});
    check_values(back, {0, 0, 1, 2, 3, 4, 0, 0, 5, 6, 7, 8});
    check_values(
        kernels::slice_backward(Tensor::from_values({2, 3, 1}, {1, 2, 3, 4, 5, 6}, dt), {2, 3, 2}, 2, 0),
        {1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0});
  }
}

TEST_CASE("slice errors name the op and the shape", "[kernels][shape][errors]") {
  Tensor x = Tensor::zeros({2, 3});
  CHECK_THROWS_WITH(kernels::slice(x, 1, 2, 2), Catch::Contains("slice") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(kernels::slice(x, 1, -1, 1), Catch::Contains("slice") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(kernels::slice(x, 3, 0, 1), Catch::Contains("slice") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_WITH(
      kernels::slice_backward(Tensor::zeros({2, 2}), {3, 3}, 1, 0),
      Catch::Contains("slice_backward") && Catch::Contains("[2, 2]") && Catch::Contains("[3, 3]"));
}

TEST_CASE("activation kernels reject non-float dtypes by op name", "[kernels][activation][errors]") {
  Tensor h = Tensor::zeros({2}, DType::f16);
  CHECK_THROWS_WITH(kernels::relu(h), Catch::Contains("relu") && Catch::Contains("float16"));
  CHECK_THROWS_WITH(kernels::softplus(h), Catch::Contains("softplus"));
  CHECK_THROWS_WITH(kernels::relu_backward(Tensor::zeros({2}), Tensor::zeros({3})),
                    Catch::Contains("relu_backward") && Catch::Contains("[2]") && Catch::Contains("[3]"));
}
