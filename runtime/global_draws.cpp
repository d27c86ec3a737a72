#include "runtime/global_draws.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem {

namespace {

// Calls fn(i, word) for words [first, first + count) of iteration_stream(seed, iteration),
// i counting from 0: the blocks before `first` are skipped, not drawn.
template <typename Fn>
void for_words(int64_t first, int64_t count, uint64_t seed, int64_t iteration, Fn&& fn) {
  Generator gen = iteration_stream(seed, iteration);
  gen.set_state({.seed = seed, .counter = gen.state().counter + static_cast<uint64_t>(first / 4)});
  for (int64_t i = -(first % 4); i < count; i += 4) {
    const auto block = gen.next_block();
    for (int64_t j = i < 0 ? -i : 0; j < 4 && i + j < count; ++j) fn(i + j, block[static_cast<size_t>(j)]);
  }
}

void check_rows(const char* fn, const Shape& shape, int64_t row_begin) {
  TANDEM_CHECK(!shape.empty() && row_begin >= 0,
               fn << ": needs a shape with a row dimension and row_begin >= 0, got " << shape_str(shape)
                  << " from row " << row_begin);
}

// The first row of `rank` when every one of `world` ranks holds `rows`.
int64_t rank_row_begin(const char* fn, const Shape& shape_per_rank, int rank, int world) {
  TANDEM_CHECK(!shape_per_rank.empty() && world >= 1 && rank >= 0 && rank < world,
               fn << ": shape " << shape_str(shape_per_rank) << " for rank " << rank << " of " << world);
  return rank * shape_per_rank[0];
}

}  // namespace

Tensor randint_rows(const Shape& shape, int64_t row_begin, int64_t high, uint64_t seed, int64_t iteration) {
  check_rows("randint_rows", shape, row_begin);
  TANDEM_CHECK(high >= 1 && high <= (int64_t{1} << 32),
               "randint_rows: high must be in [1, 2^32], got " << high);
  Tensor out = Tensor::empty(shape, DType::i64);
  const int64_t row_elements = shape[0] == 0 ? 0 : out.numel() / shape[0];
  int64_t* p = out.data<int64_t>();
  for_words(row_begin * row_elements, out.numel(), seed, iteration, [&](int64_t i, uint32_t word) {
    p[i] = static_cast<int64_t>((static_cast<uint64_t>(word) * static_cast<uint64_t>(high)) >> 32);
  });
  return out;
}

Tensor randint_global_rows(const Shape& shape_per_rank, int64_t high, uint64_t seed, int64_t iteration,
                           int rank, int world) {
  const int64_t begin = rank_row_begin("randint_global_rows", shape_per_rank, rank, world);
  return randint_rows(shape_per_rank, begin, high, seed, iteration);
}

Tensor dropout_mask_rows(const Shape& shape, int64_t row_begin, double p, uint64_t seed, int64_t iteration,
                         DType dtype) {
  check_rows("dropout_mask_rows", shape, row_begin);
  TANDEM_CHECK(p >= 0.0 && p <= 1.0, "dropout_mask_rows: p must be in [0, 1], got " << p);
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::f64,
               "dropout_mask_rows: draws float32 or float64, not " << dtype_name(dtype));
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t row_elements = shape[0] == 0 ? 0 : out.numel() / shape[0];
  const double keep = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  auto fill = [&]<typename T>(T* dst) {
    for_words(row_begin * row_elements, out.numel(), seed, iteration, [&](int64_t i, uint32_t word) {
      dst[i] = static_cast<double>(uniform_from_word(word)) < p ? T(0) : static_cast<T>(keep);
    });
  };
  if (dtype == DType::f64) {
    fill(out.data<double>());
  } else {
    fill(out.data<float>());
  }
  return out;
}

Tensor dropout_mask_global_rows(const Shape& shape_per_rank, double p, uint64_t seed, int64_t iteration,
                                int rank, int world, DType dtype) {
  const int64_t begin = rank_row_begin("dropout_mask_global_rows", shape_per_rank, rank, world);
  return dropout_mask_rows(shape_per_rank, begin, p, seed, iteration, dtype);
}

Tensor categorical_rows(const Tensor& weights, int64_t row_begin, uint64_t seed, int64_t iteration,
                        CategoricalWeights kind) {
  const char* fn = "categorical_rows";
  TANDEM_CHECK(weights.defined() && weights.dim() == 2 && weights.size(1) >= 1,
               fn << ": needs weights [rows, classes >= 1], got "
                  << (weights.defined() ? shape_str(weights.shape()) : "undefined"));
  TANDEM_CHECK(row_begin >= 0, fn << ": row_begin must be >= 0, got " << row_begin);
  TANDEM_CHECK(weights.dtype() == DType::f32 || weights.dtype() == DType::f64,
               fn << ": weights must be float32 or float64, not " << dtype_name(weights.dtype()));
  const int64_t rows = weights.size(0), k = weights.size(1);
  const std::vector<double> w = (weights.device().is_cpu() ? weights : weights.to(Device::cpu())).to_vector();
  Tensor out = Tensor::empty({rows}, DType::i64);
  int64_t* p = out.data<int64_t>();
  std::vector<double> row(static_cast<size_t>(k));
  const bool logits = kind == CategoricalWeights::logits;
  const char* what = logits ? "logit" : "weight";
  const char* rule = logits ? "logits must be finite or -inf" : "weights must be finite and >= 0";
  for_words(row_begin, rows, seed, iteration, [&](int64_t i, uint32_t word) {
    const double* in = w.data() + i * k;
    double top = -INFINITY;  // logits: the weights are exp(logit - top), at most 1
    if (logits)
      for (int64_t c = 0; c < k; ++c) top = std::max(top, in[c]);
    double total = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      const double v = logits ? (in[c] == -INFINITY ? 0.0 : std::exp(in[c] - top)) : in[c];
      TANDEM_CHECK(std::isfinite(v) && v >= 0.0, fn << ": row " << i << " has " << what << " " << in[c]
                                                    << " at class " << c << " (" << rule << ")");
      row[static_cast<size_t>(c)] = v;
      total += v;
    }
    TANDEM_CHECK(total > 0.0, fn << ": row " << i << " has no class of positive weight");
    const double target = static_cast<double>(uniform_from_word(word)) * total;
    int64_t chosen = -1;
    double cumulative = 0.0;
    for (int64_t c = 0; c < k; ++c) {
      if (row[static_cast<size_t>(c)] == 0.0) continue;
      chosen = c;  // the last positive class, should rounding leave target past the total
      cumulative += row[static_cast<size_t>(c)];
      if (cumulative > target) break;
    }
    p[i] = chosen;
  });
  return out;
}

Tensor categorical_global_rows(const Tensor& weights_per_rank, uint64_t seed, int64_t iteration, int rank,
                               int world, CategoricalWeights kind) {
  TANDEM_CHECK(weights_per_rank.defined() && weights_per_rank.dim() == 2,
               "categorical_global_rows: needs weights [rows, classes], got "
                   << (weights_per_rank.defined() ? shape_str(weights_per_rank.shape()) : "undefined"));
  const int64_t begin = rank_row_begin("categorical_global_rows", weights_per_rank.shape(), rank, world);
  return categorical_rows(weights_per_rank, begin, seed, iteration, kind);
}

}  // namespace tandem
