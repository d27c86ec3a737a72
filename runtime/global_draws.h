// Draws over the global batch beyond normal noise (runtime/rng.h's randn_global_rows): uniform
// integers, categorical samples and dropout masks, each defined as one draw over the whole
// global batch from iteration_stream(seed, iteration), of which a rank draws its own rows
// alone, so that N ranks together hold bitwise what one process draws for the whole batch.
//
// Contract:
// - `seed` is the key of one purpose's stream: mix the purpose in (as the trainer's stream
//   keys do), or two kinds of draw with the same key and iteration share their numbers.
// - Element i of a global draw (row-major over [total_rows, row...]) is built from word i of
//   the stream (word i is word i % 4 of block i / 4 of iteration_stream(seed, iteration)):
//   - randint: (word * high) >> 32, an integer in [0, high) (high in [1, 2^32]; each value's
//     probability is within 2^-32 of 1 / high), int64.
//   - dropout mask: 0 where uniform_from_word(word) < p, else 1 / (1 - p) (all 0 for p = 1),
//     float32 or float64, so x * mask keeps each element with probability 1 - p (to within
//     2^-24) and keeps the mean (PyTorch's inverted dropout).
//   - categorical: row i of `weights` [rows, k] draws one class from word i (one word per
//     row): the first class c whose cumulative weight (in float64) exceeds
//     uniform_from_word(word) * (sum of the row's weights), never a class of weight 0.
//     Weights are non-negative probabilities (not necessarily normalised) or logits (then
//     the weights are exp(logit - max logit)). int64 [rows].
// - *_rows(shape or weights, row_begin, ...): rows [row_begin, row_begin + rows) of the
//   global draw. *_global_rows(..., rank, world): every rank holds the same number of rows
//   (shape_per_rank[0], or weights_per_rank.size(0)), rank r those from r times that count.
// - Results are CPU tensors; categorical weights on a GPU are read back first. Errors name
//   the function and the offending value or shape.
#pragma once

#include <cstdint>

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace tandem {

Tensor randint_rows(const Shape& shape, int64_t row_begin, int64_t high, uint64_t seed, int64_t iteration);
Tensor randint_global_rows(const Shape& shape_per_rank, int64_t high, uint64_t seed, int64_t iteration,
                           int rank, int world);

Tensor dropout_mask_rows(const Shape& shape, int64_t row_begin, double p, uint64_t seed, int64_t iteration,
                         DType dtype = DType::f32);
Tensor dropout_mask_global_rows(const Shape& shape_per_rank, double p, uint64_t seed, int64_t iteration,
                                int rank, int world, DType dtype = DType::f32);

enum class CategoricalWeights { probabilities, logits };
Tensor categorical_rows(const Tensor& weights, int64_t row_begin, uint64_t seed, int64_t iteration,
                        CategoricalWeights kind = CategoricalWeights::probabilities);
Tensor categorical_global_rows(const Tensor& weights_per_rank, uint64_t seed, int64_t iteration, int rank,
                               int world, CategoricalWeights kind = CategoricalWeights::probabilities);

}  // namespace tandem
