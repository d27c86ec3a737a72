#include "runtime/rng.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tandem {

namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

std::array<uint32_t, 4> philox4x32_10(uint64_t counter, uint64_t key) {
  std::array<uint32_t, 4> c = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0u, 0u};
  uint32_t k0 = static_cast<uint32_t>(key);
  uint32_t k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return c;
}

// Two uniforms (u1 in (0, 1], u2 in [0, 1)) -> two standard normals.
void box_muller(uint32_t w1, uint32_t w2, double& n1, double& n2) {
  double u1 = (static_cast<double>(w1) + 1.0) * (1.0 / 4294967296.0);
  double u2 = static_cast<double>(w2) * (1.0 / 4294967296.0);
  double r = std::sqrt(-2.0 * std::log(u1));
  double theta = 2.0 * std::numbers::pi * u2;
  n1 = r * std::cos(theta);
  n2 = r * std::sin(theta);
}

// `skip` (0..3) words of the first block are dropped, as in fill_normal_impl.
template <typename T>
void fill_uniform_impl(T* p, int64_t n, double lo, double hi, Generator& gen, int64_t skip = 0) {
  for (int64_t i = -skip; i < n; i += 4) {
    auto block = gen.next_block();
    for (int64_t j = std::max<int64_t>(0, -i); j < 4 && i + j < n; ++j) {
      p[i + j] = static_cast<T>(
          lo + (hi - lo) * static_cast<double>(uniform_from_word(block[static_cast<size_t>(j)])));
    }
  }
}

// `skip` (0..3) normals of the first block are drawn and dropped: p[0] is then the value a
// fill starting at that block would put at position `skip`.
template <typename T>
void fill_normal_impl(T* p, int64_t n, double mean, double stddev, Generator& gen, int64_t skip = 0) {
  for (int64_t i = -skip; i < n; i += 4) {
    auto b = gen.next_block();
    double v[4];
    box_muller(b[0], b[1], v[0], v[1]);
    box_muller(b[2], b[3], v[2], v[3]);
    for (int64_t j = std::max<int64_t>(0, -i); j < 4 && i + j < n; ++j)
      p[i + j] = static_cast<T>(mean + stddev * v[j]);
  }
}

}  // namespace

std::array<uint32_t, 4> Generator::next_block() { return philox4x32_10(counter_++, seed_); }

double Generator::uniform(double lo, double hi) {
  auto b = next_block();
  return lo + (hi - lo) * static_cast<double>(uniform_from_word(b[0]));
}

double Generator::normal(double mean, double stddev) {
  auto b = next_block();
  double n1, n2;
  box_muller(b[0], b[1], n1, n2);
  return mean + stddev * n1;
}

uint64_t Generator::below(uint64_t n) {
  TANDEM_CHECK(n > 0, "Generator::below(0)");
  auto b = next_block();
  uint64_t x = (static_cast<uint64_t>(b[0]) << 32) | b[1];
  return x % n;  // bias below 2^-32 for the sizes we draw from
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

// A GPU tensor is filled on the host and copied over, so it gets the very numbers a CPU
// tensor would (the noise of a GAN step is small; this is not a hot path).
template <typename Fill>
bool filled_through_host(Tensor& t, Fill&& fill) {
  if (t.device().is_cpu()) return false;
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  fill(host);
  t.copy_(host);
  return true;
}

}  // namespace

void fill_uniform(Tensor& t, double lo, double hi, Generator& gen) {
  if (filled_through_host(t, [&](Tensor& h) { fill_uniform(h, lo, hi, gen); })) return;
  if (t.dtype() == DType::f64) {
    fill_uniform_impl(t.data<double>(), t.numel(), lo, hi, gen);
  } else {
    fill_uniform_impl(t.data<float>(), t.numel(), lo, hi, gen);
  }
}

void fill_normal(Tensor& t, double mean, double stddev, Generator& gen) {
  if (filled_through_host(t, [&](Tensor& h) { fill_normal(h, mean, stddev, gen); })) return;
  if (t.dtype() == DType::f64) {
    fill_normal_impl(t.data<double>(), t.numel(), mean, stddev, gen);
  } else {
    fill_normal_impl(t.data<float>(), t.numel(), mean, stddev, gen);
  }
}

Generator iteration_stream(uint64_t seed, int64_t iteration) {
  TANDEM_CHECK(iteration >= 0 && iteration < (int64_t{1} << 32),
               "iteration_stream: iteration " << iteration << " is outside [0, 2^32)");
  Generator gen(seed);
  gen.set_state({.seed = seed, .counter = static_cast<uint64_t>(iteration) << 32});
  return gen;
}

Tensor randn_rows(const Shape& shape, int64_t row_begin, uint64_t seed, int64_t iteration, DType dtype) {
  TANDEM_CHECK(!shape.empty() && row_begin >= 0,
               "randn_rows: needs a shape with a row dimension and row_begin >= 0, got "
                   << shape_str(shape) << " from row " << row_begin);
  TANDEM_CHECK(dtype == DType::f32 || dtype == DType::f64,
               "randn_rows: draws float32 or float64, not " << dtype_name(dtype));
  Tensor out = Tensor::empty(shape, dtype);
  const int64_t row_elements = shape[0] == 0 ? 0 : out.numel() / shape[0];
  const int64_t first = row_begin * row_elements;  // the element of the global draw at out[0]
  Generator gen = iteration_stream(seed, iteration);
  gen.set_state({.seed = seed, .counter = gen.state().counter + static_cast<uint64_t>(first / 4)});
  if (dtype == DType::f64) {
    fill_normal_impl(out.data<double>(), out.numel(), 0.0, 1.0, gen, first % 4);
  } else {
    fill_normal_impl(out.data<float>(), out.numel(), 0.0, 1.0, gen, first % 4);
  }
  return out;
}

Tensor rand_rows(const Shape& shape, int64_t row_begin, uint64_t seed, int64_t iteration) {
  TANDEM_CHECK(!shape.empty() && row_begin >= 0,
               "rand_rows: needs a shape with a row dimension and row_begin >= 0, got "
                   << shape_str(shape) << " from row " << row_begin);
  Tensor out = Tensor::empty(shape, DType::f32);
  const int64_t row_elements = shape[0] == 0 ? 0 : out.numel() / shape[0];
  const int64_t first = row_begin * row_elements;  // the element of the global draw at out[0]
  Generator gen = iteration_stream(seed, iteration);
  gen.set_state({.seed = seed, .counter = gen.state().counter + static_cast<uint64_t>(first / 4)});
  fill_uniform_impl(out.data<float>(), out.numel(), 0.0, 1.0, gen, first % 4);
  return out;
}

Tensor randn_global_rows(const std::vector<int64_t>& rows_per_rank, const Shape& row_shape, uint64_t seed,
                         int64_t iteration, int rank, DType dtype) {
  TANDEM_CHECK(rank >= 0 && static_cast<size_t>(rank) < rows_per_rank.size(),
               "randn_global_rows: rank " << rank << " of " << rows_per_rank.size() << " ranks");
  int64_t begin = 0;
  for (int r = 0; r < rank; ++r) begin += rows_per_rank[static_cast<size_t>(r)];
  const int64_t rows = rows_per_rank[static_cast<size_t>(rank)];
  TANDEM_CHECK(rows >= 0, "randn_global_rows: rank " << rank << " has " << rows << " rows");
  Shape shape{rows};
  shape.insert(shape.end(), row_shape.begin(), row_shape.end());
  return randn_rows(shape, begin, seed, iteration, dtype);
}

Tensor randn_global_rows(const Shape& shape_per_rank, uint64_t seed, int64_t iteration, int rank, int world,
                         DType dtype) {
  TANDEM_CHECK(
      !shape_per_rank.empty() && world >= 1 && rank >= 0 && rank < world,
      "randn_global_rows: shape " << shape_str(shape_per_rank) << " for rank " << rank << " of " << world);
  return randn_rows(shape_per_rank, rank * shape_per_rank[0], seed, iteration, dtype);
}

}  // namespace tandem
