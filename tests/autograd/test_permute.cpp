// permute and transpose (autograd/ops.h): values against a direct index loop on every
// permutation of a 4-D tensor, the gradient as the inverse permutation, first-order
// gradchecks (second order in test_second_order.cpp), and the named errors.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "tests/autograd/expect_gradients.h"

using namespace tandem;
using testing::expect_gradients_match;

namespace {

// permute(x, dims) by a direct loop: out[i0, i1, i2, i3] = x[j] with j[dims[k]] = i_k.
std::vector<double> permute_loop(const Tensor& x, const std::vector<int64_t>& dims) {
  const Shape in = x.shape();
  const std::vector<double> v = x.to_vector();
  Shape out_shape(4);
  for (size_t k = 0; k < 4; ++k) out_shape[k] = in[static_cast<size_t>(dims[k])];
  std::vector<double> out;
  int64_t i[4], j[4];
  for (i[0] = 0; i[0] < out_shape[0]; ++i[0])
    for (i[1] = 0; i[1] < out_shape[1]; ++i[1])
      for (i[2] = 0; i[2] < out_shape[2]; ++i[2])
        for (i[3] = 0; i[3] < out_shape[3]; ++i[3]) {
          for (size_t k = 0; k < 4; ++k) j[dims[k]] = i[k];
          out.push_back(v[static_cast<size_t>(((j[0] * in[1] + j[1]) * in[2] + j[2]) * in[3] + j[3])]);
        }
  return out;
}

}  // namespace

TEST_CASE("permute: every permutation of a 4-D tensor against a direct loop", "[shape][permute]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Variable x = random_input({2, 3, 4, 5}, 301);
    const Variable xd(x.data().to(dtype));
    std::vector<int64_t> dims{0, 1, 2, 3};
    do {
      INFO(dtype_name(dtype) << " dims " << dims[0] << dims[1] << dims[2] << dims[3]);
      const Variable y = permute(xd, dims);
      for (size_t k = 0; k < 4; ++k) CHECK(y.size(static_cast<int64_t>(k)) == x.size(dims[k]));
      CHECK(y.data().to_vector() == permute_loop(xd.data(), dims));  // a copy: bitwise
    } while (std::next_permutation(dims.begin(), dims.end()));
  }
  // Negative dims count from the end; a 1-D and a 0-size tensor pass through.
  const Variable x = random_input({2, 3, 4, 5}, 302);
  CHECK(permute(x, {-1, 0, -2, 1}).data().to_vector() == permute_loop(x.data(), {3, 0, 2, 1}));
  CHECK(permute(tensor({3}, {1, 2, 3}), {0}).data().to_vector() == std::vector<double>{1, 2, 3});
  CHECK(permute(Variable(Tensor::zeros({2, 0, 3})), {2, 0, 1}).shape() == Shape{3, 2, 0});
}

TEST_CASE("transpose swaps two axes: a matrix's transpose and a permute", "[shape][permute]") {
  const Variable m = tensor({2, 3}, {1, 2, 3, 4, 5, 6}, false, DType::f64);
  CHECK(transpose(m, 0, 1).shape() == Shape{3, 2});
  CHECK(transpose(m, 0, 1).data().to_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(transpose(m, -1, 0).data().to_vector() == std::vector<double>{1, 4, 2, 5, 3, 6});
  CHECK(transpose(m, 1, 1).data().to_vector() == m.data().to_vector());
  const Variable x = random_input({2, 3, 4, 5}, 303);
  CHECK(transpose(x, 1, 3).data().to_vector() == permute_loop(x.data(), {0, 3, 2, 1}));
}

TEST_CASE("permute's gradient is the inverse permutation", "[shape][permute][gradcheck]") {
  // A gradient with distinct entries lands where each output element came from.
  const Variable x = random_input({2, 3, 4}, 304);
  const Variable w = random_input({4, 2, 3}, 305);
  sum(mul(permute(x, {2, 0, 1}), Variable(w.data()))).backward();
  CHECK(x.grad().to_vector() == permute(Variable(w.data()), {1, 2, 0}).data().to_vector());
  expect_gradients_match("permute",
                         [](const std::vector<Variable>& v) {
                           return permute(v[0], {2, 0, 3, 1});
                         },
                         {random_input({2, 3, 2, 4}, 306)});
  expect_gradients_match("transpose",
                         [](const std::vector<Variable>& v) { return mul(transpose(v[0], 0, 2), v[1]); },
                         {random_input({2, 3, 4}, 307), random_input({4, 3, 2}, 308)});
}

TEST_CASE("permute and transpose errors name the op, the dims and the shape", "[shape][permute][errors]") {
  const Variable x = random_input({2, 3, 4}, 309);
  CHECK_THROWS_WITH(permute(x, {0, 1, 1}), Catch::Contains("permute") && Catch::Contains("(0, 1, 1)") &&
                                               Catch::Contains("repeat axis 1") &&
                                               Catch::Contains("[2, 3, 4]"));
  CHECK_THROWS_WITH(
      permute(x, {0, 3, 1}),
      Catch::Contains("permute: dim 3 of dims (0, 3, 1) is out of range") && Catch::Contains("[2, 3, 4]"));
  CHECK_THROWS_WITH(permute(x, {0, -4, 1}), Catch::Contains("dim -4"));
  CHECK_THROWS_WITH(permute(x, {1, 0}),
                    Catch::Contains("permute: dims (1, 0) name 2 axes for shape [2, 3, 4]"));
  CHECK_THROWS_WITH(transpose(x, 0, 3),
                    Catch::Contains("transpose: dim 3 (of dims 0, 3) is out of range for shape [2, 3, 4]"));
  CHECK_THROWS_WITH(transpose(x, -4, 0), Catch::Contains("transpose: dim -4"));
  CHECK_THROWS_WITH(
      permute(Variable(Tensor::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1})), {0, 1, 2, 3, 4, 5, 6, 7, 8}),
      Catch::Contains("permute") && Catch::Contains("more than 8 axes"));
}
