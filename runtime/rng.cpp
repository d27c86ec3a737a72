#include "runtime/rng.h"

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

template <typename T>
void fill_uniform_impl(T* p, int64_t n, double lo, double hi, Generator& gen) {
  for (int64_t i = 0; i < n; i += 4) {
    auto block = gen.next_block();
    for (int64_t j = 0; j < 4 && i + j < n; ++j) {
      p[i + j] = static_cast<T>(
          lo + (hi - lo) * static_cast<double>(uniform_from_word(block[static_cast<size_t>(j)])));
    }
  }
}

template <typename T>
void fill_normal_impl(T* p, int64_t n, double mean, double stddev, Generator& gen) {
  for (int64_t i = 0; i < n; i += 4) {
    auto b = gen.next_block();
    double v[4];
    box_muller(b[0], b[1], v[0], v[1]);
    box_muller(b[2], b[3], v[2], v[3]);
    for (int64_t j = 0; j < 4 && i + j < n; ++j) p[i + j] = static_cast<T>(mean + stddev * v[j]);
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

}  // namespace tandem
