#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "runtime/rng.h"
#include "runtime/tensor.h"

using namespace tandem;

namespace {

// The one-process draw of the global batch: what the ranks' rows must equal bitwise.
Tensor global_draw(const Shape& shape, uint64_t seed, int64_t iteration, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  Generator gen = iteration_stream(seed, iteration);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

// The ranks' tensors laid end to end, compared with the global draw byte for byte.
bool equals_concatenated(const Tensor& global, const std::vector<Tensor>& parts) {
  size_t at = 0;
  const auto* bytes = static_cast<const unsigned char*>(global.raw_data());
  for (const Tensor& p : parts) {
    if (at + p.bytes() > global.bytes()) return false;
    if (p.bytes() > 0 && std::memcmp(bytes + at, p.raw_data(), p.bytes()) != 0) return false;
    at += p.bytes();
  }
  return at == global.bytes();
}

}  // namespace

TEST_CASE("randn_global_rows: W ranks' rows are bitwise the one-process global draw", "[rng][noise]") {
  // Rows of 3 and 5 values: most ranks start in the middle of a Philox block of four.
  for (const Shape& row : {Shape{3}, Shape{5}, Shape{2, 2}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      for (int world = 1; world <= 4; ++world) {
        const int64_t per_rank = 3;
        Shape global_shape{world * per_rank};
        global_shape.insert(global_shape.end(), row.begin(), row.end());
        const Tensor global = global_draw(global_shape, 42, 7, dtype);
        std::vector<Tensor> parts;
        Shape per_rank_shape{per_rank};
        per_rank_shape.insert(per_rank_shape.end(), row.begin(), row.end());
        for (int r = 0; r < world; ++r)
          parts.push_back(randn_global_rows(per_rank_shape, 42, 7, r, world, dtype));
        INFO("row " << shape_str(row) << ", " << dtype_name(dtype) << ", " << world << " ranks");
        CHECK(parts[0].shape() == per_rank_shape);
        CHECK(equals_concatenated(global, parts));
      }
    }
  }
}

TEST_CASE("randn_global_rows: uneven rows per rank, an empty rank included", "[rng][noise]") {
  const Shape row{3};
  for (const std::vector<int64_t>& counts :
       std::vector<std::vector<int64_t>>{{5}, {3, 2}, {1, 0, 4}, {2, 3, 0, 1}, {0, 0, 0, 7}}) {
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    const Tensor global = global_draw({total, 3}, 9, 123, DType::f32);
    std::vector<Tensor> parts;
    for (size_t r = 0; r < counts.size(); ++r) {
      parts.push_back(randn_global_rows(counts, row, 9, 123, static_cast<int>(r)));
      CHECK(parts.back().shape() == Shape{counts[r], 3});
    }
    INFO(counts.size() << " ranks");
    CHECK(equals_concatenated(global, parts));
  }
}

TEST_CASE("randn_global_rows: each (seed, iteration) is its own stream", "[rng][noise]") {
  const Tensor a = randn_global_rows({4, 2}, 1, 0, 0, 1);
  CHECK_FALSE(equals_concatenated(a, {randn_global_rows({4, 2}, 1, 1, 0, 1)}));  // next iteration
  CHECK_FALSE(equals_concatenated(a, {randn_global_rows({4, 2}, 2, 0, 0, 1)}));  // another seed
  CHECK(equals_concatenated(a, {randn_global_rows({4, 2}, 1, 0, 0, 1)}));        // reproducible
  CHECK_THROWS_WITH(randn_global_rows({4, 2}, 1, 0, 2, 2), Catch::Contains("rank 2 of 2"));
  CHECK_THROWS_WITH(iteration_stream(1, -1), Catch::Contains("iteration -1 is outside [0, 2^32)"));
}

TEST_CASE("rand_rows: any run of rows is bitwise those rows of the one-process uniform draw",
          "[rng][noise]") {
  // Rows of 3, 5 and 10 values: most runs start in the middle of a Philox block of four.
  for (int64_t row : {3, 5, 10}) {
    const int64_t total = 13;
    Tensor global = Tensor::empty({total, row});
    Generator gen = iteration_stream(99, 4);
    fill_uniform(global, 0.0, 1.0, gen);
    for (int64_t begin = 0; begin < total; ++begin) {
      for (int64_t rows = 0; begin + rows <= total; rows += 3) {
        INFO("rows [" << begin << ", " << begin + rows << ") of " << row << " values");
        const Tensor part = rand_rows({rows, row}, begin, 99, 4);
        REQUIRE(part.shape() == Shape{rows, row});
        CHECK(std::memcmp(part.raw_data(), global.narrow_rows(begin, rows).clone().raw_data(),
                          part.bytes()) == 0);
      }
    }
  }
}
