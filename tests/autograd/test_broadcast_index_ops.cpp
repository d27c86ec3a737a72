// The broadcasting elementwise ops and the index ops on Variables: float64 gradients
// against central finite differences (each broadcast operand's gradient summed back to its
// shape, repeated indices summed), nn::Embedding, and the named errors.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;

namespace {

using Fn = testing::GradFn;
using testing::expect_gradients_match;

// |x| + 0.5: a denominator well away from zero.
Variable positive(Variable v) {
  double* p = v.data().data<double>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] = std::abs(p[i]) + 0.5;
  return v;
}

Tensor indices(const std::vector<double>& v) {
  return Tensor::from_values({static_cast<int64_t>(v.size())}, v, DType::i64);
}

// Pairs of shapes that broadcast: a row, a column, both ways, a scalar, leading axes.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {{3, 4}, {4}}, {{4}, {3, 4}}, {{3, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}}, {{}, {2, 3}}, {{3, 4}, {1, 1}}};

}  // namespace

TEST_CASE("gradcheck: add, sub, mul and div with broadcasting", "[gradcheck][broadcast]") {
  uint64_t seed = 300;
  for (const auto& [sa, sb] : kShapePairs) {
    const std::string shapes = shape_str(sa) + " and " + shape_str(sb);
    auto inputs = [&, sa = sa, sb = sb] {
      return std::vector<Variable>{random_input(sa, ++seed), random_input(sb, ++seed)};
    };
    expect_gradients_match(
        "add " + shapes, [](const std::vector<Variable>& v) { return v[0] + v[1]; }, inputs());
    expect_gradients_match(
        "sub " + shapes, [](const std::vector<Variable>& v) { return v[0] - v[1]; }, inputs());
    expect_gradients_match(
        "mul " + shapes, [](const std::vector<Variable>& v) { return v[0] * v[1]; }, inputs());
    expect_gradients_match("div " + shapes, [](const std::vector<Variable>& v) { return v[0] / v[1]; },
                           {random_input(sa, ++seed), positive(random_input(sb, ++seed))});
  }
  // Equal shapes (the same-shape kernels) and one operand used on both sides.
  expect_gradients_match("div, equal shapes", [](const std::vector<Variable>& v) { return v[0] / v[1]; },
                         {random_input({3, 4}, 320), positive(random_input({3, 4}, 321))});
  expect_gradients_match("x * row(x) ", [](const std::vector<Variable>& v) { return v[0] * sum(v[0], 0); },
                         {random_input({3, 4}, 322)});
}

TEST_CASE("gradcheck: sum_to and broadcast_to", "[gradcheck][broadcast]") {
  expect_gradients_match("sum_to [2, 3, 4] -> [3, 1]",
                         [](const std::vector<Variable>& v) {
                           return sum_to(v[0], {3, 1});
                         },
                         {random_input({2, 3, 4}, 330)});
  expect_gradients_match("broadcast_to [3, 1] -> [2, 3, 4]",
                         [](const std::vector<Variable>& v) {
                           return broadcast_to(v[0], {2, 3, 4});
                         },
                         {random_input({3, 1}, 331)});
}

TEST_CASE("a broadcast operand's gradient has its shape and sums the broadcast copies", "[broadcast]") {
  Variable x = tensor({2, 3}, {1, 2, 3, 4, 5, 6}, true);
  Variable b = tensor({3}, {10, 20, 30}, true);
  Variable c = tensor({2, 1}, {2, 4}, true);
  sum((x + b) * c).backward();
  // d/db = sum over rows of c: 2 + 4; d/dc = row sums of x + b; d/dx = c along each row.
  CHECK(b.grad().shape() == Shape{3});
  CHECK(b.grad().to_vector() == std::vector<double>{6, 6, 6});
  CHECK(c.grad().shape() == Shape{2, 1});
  CHECK(c.grad().to_vector() == std::vector<double>{66, 75});
  CHECK(x.grad().to_vector() == std::vector<double>{2, 2, 2, 4, 4, 4});
}

TEST_CASE("broadcasting errors on Variables name the op and both shapes", "[broadcast][errors]") {
  Variable a = zeros({8, 4}), b = zeros({3});
  CHECK_THROWS_WITH(add(a, b), Catch::EndsWith("add: shapes [8, 4] and [3] do not broadcast"));
  CHECK_THROWS_WITH(a / zeros({4, 8}), Catch::EndsWith("div: shapes [8, 4] and [4, 8] do not broadcast"));
}

TEST_CASE("gradcheck: index_select along each dim, with repeated indices", "[gradcheck][index]") {
  expect_gradients_match("index_select dim 0",
                         [](const std::vector<Variable>& v) {
                           return index_select(v[0], 0, indices({3, 0, 3, 1, 3}));
                         },
                         {random_input({4, 3}, 340)});
  expect_gradients_match("index_select dim 1 of 3",
                         [](const std::vector<Variable>& v) {
                           return index_select(v[0], 1, indices({2, 2, 0}));
                         },
                         {random_input({2, 3, 2}, 341)});
  expect_gradients_match("index_select dim -1",
                         [](const std::vector<Variable>& v) {
                           return index_select(v[0], -1, indices({1, 1}));
                         },
                         {random_input({3, 2}, 342)});
}

TEST_CASE("one_hot is a constant of the index's shape plus classes", "[index]") {
  Variable h = one_hot(Tensor::from_values({2}, {2, 0}, DType::i64), 3);
  CHECK_FALSE(h.requires_grad());
  CHECK(h.dtype() == DType::f32);
  CHECK(h.shape() == Shape{2, 3});
  CHECK(h.data().to_vector() == std::vector<double>{0, 0, 1, 1, 0, 0});
}

TEST_CASE("nn::Embedding looks up rows and sums the gradients of repeated ones", "[nn][index]") {
  Generator gen(5);
  nn::Embedding emb(4, 3, gen);
  REQUIRE(emb.parameters().size() == 1);
  CHECK(emb.parameters()[0].name() == "weight");
  CHECK(emb.weight.shape() == Shape{4, 3});
  CHECK(emb.type_name() == "Embedding(4, 3)");
  const std::vector<double> w = emb.weight.data().to_vector();

  Tensor index = Tensor::from_values({2, 2}, {3, 1, 3, 0}, DType::i64);
  Variable out = emb(Variable(index));
  REQUIRE(out.shape() == Shape{2, 2, 3});
  const std::vector<double> got = out.data().to_vector();
  const int64_t rows[] = {3, 1, 3, 0};
  for (size_t r = 0; r < 4; ++r)
    for (size_t k = 0; k < 3; ++k) CHECK(got[r * 3 + k] == w[size_t(rows[r]) * 3 + k]);

  // Weighted sum: row 3 is used twice, row 2 never.
  Variable weights = tensor({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  sum(out * weights).backward();
  CHECK(emb.weight.grad().to_vector() ==
        std::vector<double>{10, 11, 12, 4, 5, 6, 0, 0, 0, 1 + 7, 2 + 8, 3 + 9});

  CHECK(emb.forward(Tensor::from_values({3}, {0, 1, 2}, DType::i64)).shape() == Shape{3, 3});
  CHECK_THROWS_WITH(emb.forward(Tensor::from_values({2}, {1, 4}, DType::i64)),
                    Catch::Contains("index 4") && Catch::Contains("[0, 4)"));
}

TEST_CASE("gradcheck: an embedding through broadcasting, as a conditional layer uses it",
          "[gradcheck][index]") {
  // h = x * emb[label] + bias row: the cGAN's conditioning, on float64 leaves.
  Tensor labels = indices({1, 0, 1});
  expect_gradients_match(
      "x * index_select(table, labels) + row",
      [labels](const std::vector<Variable>& v) { return v[0] * index_select(v[1], 0, labels) + v[2]; },
      {random_input({3, 4}, 350), random_input({2, 4}, 351), random_input({4}, 352)});
}
