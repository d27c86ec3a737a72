// Draws over the global batch (runtime/global_draws.h): randint, dropout masks and
// categorical samples. W ranks' rows (simulated in one process, as the noise test does) laid
// end to end are the one-process draw, which the tests define word by word from
// iteration_stream; values lie in range with the frequencies expected (bounded tolerances);
// each (seed, iteration) is reproducible and its own stream; errors are named.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/global_draws.h"
#include "runtime/rng.h"

using namespace tandem;

namespace {

// Words [0, count) of iteration_stream(seed, iteration): four per block, in order.
std::vector<uint32_t> stream_words(int64_t count, uint64_t seed, int64_t iteration) {
  Generator gen = iteration_stream(seed, iteration);
  std::vector<uint32_t> words;
  while (static_cast<int64_t>(words.size()) < count) {
    for (uint32_t w : gen.next_block()) words.push_back(w);
  }
  words.resize(static_cast<size_t>(count));
  return words;
}

bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         (a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
}

// The ranks' rows laid end to end (along axis 0).
Tensor rows_end_to_end(const std::vector<Tensor>& parts) {
  Shape shape = parts.front().shape();
  shape[0] = 0;
  for (const Tensor& p : parts) shape[0] += p.size(0);
  Tensor out = Tensor::empty(shape, parts.front().dtype());
  size_t at = 0;
  for (const Tensor& p : parts) {
    if (p.bytes() > 0) std::memcpy(static_cast<char*>(out.raw_data()) + at, p.raw_data(), p.bytes());
    at += p.bytes();
  }
  return out;
}

}  // namespace

TEST_CASE("randint_global_rows: W ranks' rows are the one-process draw (word * high) >> 32",
          "[rng][global_draws]") {
  // Rows of 3 and 5 values: most ranks start in the middle of a Philox block of four.
  for (const Shape& row : {Shape{3}, Shape{5}, Shape{2, 2}}) {
    for (int64_t high : {int64_t{1}, int64_t{7}, int64_t{1} << 32}) {
      for (int world = 1; world <= 4; ++world) {
        const int64_t per_rank = 3;
        Shape per_rank_shape{per_rank}, global_shape{world * per_rank};
        per_rank_shape.insert(per_rank_shape.end(), row.begin(), row.end());
        global_shape.insert(global_shape.end(), row.begin(), row.end());
        Tensor global = Tensor::empty(global_shape, DType::i64);
        const std::vector<uint32_t> words = stream_words(global.numel(), 42, 7);
        for (int64_t i = 0; i < global.numel(); ++i)
          global.data<int64_t>()[i] =
              static_cast<int64_t>((uint64_t{words[static_cast<size_t>(i)]} * uint64_t(high)) >> 32);
        std::vector<Tensor> parts;
        for (int r = 0; r < world; ++r)
          parts.push_back(randint_global_rows(per_rank_shape, high, 42, 7, r, world));
        INFO("row " << shape_str(row) << ", high " << high << ", " << world << " ranks");
        CHECK(parts[0].shape() == per_rank_shape);
        CHECK(bytes_equal(rows_end_to_end(parts), global));
      }
    }
  }
}

TEST_CASE("randint: values in [0, high), each about 1 / high of the draws", "[rng][global_draws]") {
  const int64_t high = 10, n = 100000;
  const Tensor t = randint_rows({n}, 0, high, 5, 3);
  std::vector<int64_t> count(high, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = t.data<int64_t>()[i];
    REQUIRE(v >= 0);
    REQUIRE(v < high);
    ++count[static_cast<size_t>(v)];
  }
  // Each count is Binomial(n, 0.1): standard deviation ~95; 6 of them bound the check.
  for (int64_t c : count) CHECK(std::abs(static_cast<double>(c) - n / 10.0) < 600.0);
  CHECK(randint_rows({4}, 0, 1, 5, 3).to_vector() == std::vector<double>{0, 0, 0, 0});
}

TEST_CASE("dropout_mask_global_rows: W ranks' rows are the one-process mask", "[rng][global_draws]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double p : {0.0, 0.3, 1.0}) {
      for (int world = 1; world <= 3; ++world) {
        const Shape per_rank_shape{2, 5};
        Tensor global = Tensor::empty({2 * world, 5}, DType::f64);
        const std::vector<uint32_t> words = stream_words(global.numel(), 11, 4);
        for (int64_t i = 0; i < global.numel(); ++i)
          global.data<double>()[i] =
              uniform_from_word(words[static_cast<size_t>(i)]) < p ? 0.0 : 1.0 / (1.0 - p);
        if (p == 1.0) global.fill_(0.0);
        std::vector<Tensor> parts;
        for (int r = 0; r < world; ++r)
          parts.push_back(dropout_mask_global_rows(per_rank_shape, p, 11, 4, r, world, dtype));
        INFO(dtype_name(dtype) << " p " << p << ", " << world << " ranks");
        CHECK(bytes_equal(rows_end_to_end(parts), global.to(dtype)));
      }
    }
  }
}

TEST_CASE("dropout masks: the kept fraction is 1 - p and the mean is kept", "[rng][global_draws]") {
  const double p = 0.25;
  const int64_t n = 100000;
  const std::vector<double> m = dropout_mask_rows({n}, 0, p, 17, 0, DType::f64).to_vector();
  int64_t kept = 0;
  double total = 0;
  for (double v : m) {
    REQUIRE((v == 0.0 || v == 1.0 / (1.0 - p)));
    kept += v != 0.0;
    total += v;
  }
  // Binomial(n, 0.75): standard deviation ~137; 6 of them bound the check.
  CHECK(std::abs(static_cast<double>(kept) - 0.75 * n) < 820.0);
  CHECK(std::abs(total / n - 1.0) < 820.0 / (0.75 * n));
}

TEST_CASE("categorical_global_rows: W ranks' rows are the one-process draw; frequencies follow the weights",
          "[rng][global_draws]") {
  // Rows of 4 classes, weights unnormalised, one of weight 0 in some rows.
  const int world_max = 3, per_rank = 4, k = 4;
  Tensor weights = Tensor::empty({world_max * per_rank, k}, DType::f64);
  for (int64_t i = 0; i < weights.numel(); ++i) weights.data<double>()[i] = static_cast<double>((i * 7) % 5);
  for (int64_t r = 0; r < weights.size(0); ++r) weights.data<double>()[r * k] += 0.5;  // no all-zero row
  const std::vector<uint32_t> words = stream_words(weights.size(0), 23, 2);
  for (int world = 1; world <= world_max; ++world) {
    std::vector<Tensor> parts;
    for (int r = 0; r < world; ++r)
      parts.push_back(
          categorical_global_rows(weights.narrow_rows(r * per_rank, per_rank).clone(), 23, 2, r, world));
    const Tensor got = rows_end_to_end(parts);
    for (int64_t i = 0; i < world * per_rank; ++i) {
      // The direct inverse-CDF draw: the first class whose cumulative weight exceeds u * total.
      const double* w = weights.data<double>() + i * k;
      const double total = w[0] + w[1] + w[2] + w[3];
      const double target = uniform_from_word(words[static_cast<size_t>(i)]) * total;
      int64_t want = 0;
      double cumulative = w[0];
      while (cumulative <= target) cumulative += w[++want];
      INFO(world << " ranks, row " << i);
      CHECK(got.data<int64_t>()[i] == want);
      CHECK(w[want] > 0.0);
    }
  }
  // Frequencies over many rows of the same weights {1, 0, 3, 6} (and the same as logits).
  const int64_t n = 60000;
  Tensor probs = Tensor::empty({n, k}, DType::f32), logits = Tensor::empty({n, k}, DType::f64);
  const double row[k] = {1, 0, 3, 6};
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < k; ++c) {
      probs.data<float>()[i * k + c] = static_cast<float>(row[c]);
      logits.data<double>()[i * k + c] = row[c] > 0 ? std::log(row[c]) + 2.0 : -INFINITY;
    }
  const Tensor from_probs = categorical_rows(probs, 0, 31, 0);
  const Tensor from_logits = categorical_rows(logits, 0, 31, 0, CategoricalWeights::logits);
  std::vector<int64_t> count(k, 0);
  for (int64_t i = 0; i < n; ++i) ++count[static_cast<size_t>(from_probs.data<int64_t>()[i])];
  CHECK(count[1] == 0);
  for (int c : {0, 2, 3}) {
    const double q = row[c] / 10.0, sd = std::sqrt(n * q * (1 - q));
    CHECK(std::abs(static_cast<double>(count[static_cast<size_t>(c)]) - n * q) < 6 * sd);
  }
  // Logits are weights exp(logit): the same classes, as no uniform k / 2^24 lies within
  // rounding of the class boundaries 0.1 and 0.4 (the nearest are 0.4 / 2^24 away).
  CHECK(bytes_equal(from_logits, from_probs));
}

TEST_CASE("global draws: each (seed, iteration) is its own reproducible stream; named errors",
          "[rng][global_draws]") {
  const Tensor a = randint_global_rows({64}, 1000, 1, 0, 0, 1);
  CHECK(bytes_equal(a, randint_global_rows({64}, 1000, 1, 0, 0, 1)));        // reproducible
  CHECK_FALSE(bytes_equal(a, randint_global_rows({64}, 1000, 1, 1, 0, 1)));  // next iteration
  CHECK_FALSE(bytes_equal(a, randint_global_rows({64}, 1000, 2, 0, 0, 1)));  // another key
  const Tensor m = dropout_mask_global_rows({64}, 0.5, 1, 0, 0, 1);
  CHECK(bytes_equal(m, dropout_mask_global_rows({64}, 0.5, 1, 0, 0, 1)));
  CHECK_FALSE(bytes_equal(m, dropout_mask_global_rows({64}, 0.5, 1, 1, 0, 1)));
  CHECK_THROWS_WITH(randint_global_rows({4}, 3, 1, 0, 2, 2),
                    Catch::Contains("randint_global_rows") && Catch::Contains("rank 2 of 2"));
  CHECK_THROWS_WITH(randint_rows({4}, 0, 0, 1, 0),
                    Catch::Contains("randint_rows: high must be in [1, 2^32], got 0"));
  CHECK_THROWS_WITH(dropout_mask_rows({4}, 0, 1.5, 1, 0),
                    Catch::Contains("dropout_mask_rows: p must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(dropout_mask_global_rows({4}, 0.5, 1, 0, -1, 2), Catch::Contains("rank -1 of 2"));
  const Tensor bad = Tensor::from_values({2, 2}, {1, 1, -1, 2}, DType::f64);
  CHECK_THROWS_WITH(categorical_rows(bad, 0, 1, 0),
                    Catch::Contains("categorical_rows: row 1 has weight -1 at class 0"));
  const Tensor bad_logits = Tensor::from_values({1, 2}, {INFINITY, 0}, DType::f64);
  CHECK_THROWS_WITH(
      categorical_rows(bad_logits, 0, 1, 0, CategoricalWeights::logits),
      Catch::Contains("categorical_rows: row 0 has logit inf at class 0 (logits must be finite or -inf)"));
  CHECK_THROWS_WITH(categorical_rows(Tensor::zeros({1, 3}), 0, 1, 0),
                    Catch::Contains("categorical_rows: row 0 has no class of positive weight"));
  CHECK_THROWS_WITH(categorical_rows(Tensor::zeros({3}), 0, 1, 0),
                    Catch::Contains("needs weights [rows, classes >= 1], got [3]"));
}
