// Random numbers: seeded, counter-based, reproducible everywhere.
//
// Contract: a Generator is Philox4x32-10 keyed by a 64-bit seed; its whole state is
// (seed, counter), so it can be checkpointed and restored exactly. Each block of the
// counter gives four 32-bit words. Uniform fills use one word per element; normal fills
// use Box-Muller on word pairs (four normals per block). Fills consume whole blocks, so
// the numbers depend only on the seed and the sequence of fill calls, never on the
// platform's standard library.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace tandem {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eed) : seed_(seed) {}

  struct State {
    uint64_t seed = 0;
    uint64_t counter = 0;
  };
  State state() const { return {seed_, counter_}; }
  void set_state(const State& s) {
    seed_ = s.seed;
    counter_ = s.counter;
  }
  void manual_seed(uint64_t seed) {
    seed_ = seed;
    counter_ = 0;
  }

  // The next block of four 32-bit words.
  std::array<uint32_t, 4> next_block();

  // Single draws (each consumes a whole block).
  double uniform(double lo = 0.0, double hi = 1.0);
  double normal(double mean = 0.0, double stddev = 1.0);
  // An integer in [0, n).
  uint64_t below(uint64_t n);

 private:
  uint64_t seed_;
  uint64_t counter_ = 0;
};

// The process-wide generator used where none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

// In-place fills of f32/f64 tensors. A CUDA tensor gets the same numbers as a CPU one
// (drawn on the host, then copied).
void fill_uniform(Tensor& t, double lo, double hi, Generator& gen = default_generator());
void fill_normal(Tensor& t, double mean, double stddev, Generator& gen = default_generator());

// Global-batch noise: the noise of a global batch for iteration `iteration` of a run seeded
// `seed` is fill_normal(global, 0, 1, iteration_stream(seed, iteration)) on a tensor
// [total_rows, row_shape...]. Each rank draws its own rows of it alone, so that N ranks
// together hold bitwise the noise one process draws for the whole batch.
// - iteration_stream(seed, iteration): Philox keyed by `seed`, its counter at iteration * 2^32
//   (each iteration's stream holds 2^34 numbers; iteration must be in [0, 2^32)).
// - randn_rows(shape, row_begin, ...): rows [row_begin, row_begin + shape[0]) of that draw
//   (rows of shape[1:]), float32 or float64, on the CPU.
// - randn_global_rows(shape_per_rank, seed, iteration, rank, world): every rank holds
//   shape_per_rank[0] rows, rank r rows [r * B, (r + 1) * B) (the sampler's split).
//   randn_global_rows(rows_per_rank, row_shape, ..., rank): uneven counts, rank r's rows
//   following those of ranks 0..r-1 (a rank may hold none).
// - rand_rows(shape, row_begin, seed, iteration): the same for fill_uniform(global, 0, 1,
//   iteration_stream(seed, iteration)), float32.
Generator iteration_stream(uint64_t seed, int64_t iteration);
Tensor randn_rows(const Shape& shape, int64_t row_begin, uint64_t seed, int64_t iteration,
                  DType dtype = DType::f32);
Tensor rand_rows(const Shape& shape, int64_t row_begin, uint64_t seed, int64_t iteration);
Tensor randn_global_rows(const Shape& shape_per_rank, uint64_t seed, int64_t iteration, int rank, int world,
                         DType dtype = DType::f32);
Tensor randn_global_rows(const std::vector<int64_t>& rows_per_rank, const Shape& row_shape, uint64_t seed,
                         int64_t iteration, int rank, DType dtype = DType::f32);

// Philox word -> float in [0, 1) with 24 random bits (exact in float32), and the pair
// transform used by fill_normal. Exposed so CUDA kernels can reproduce the same numbers.
inline float uniform_from_word(uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

}  // namespace tandem
