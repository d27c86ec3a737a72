#include "autograd/init.h"

#include <cmath>

namespace tandem::nn::init {

int64_t fan_in(const Shape& s) {
  TANDEM_CHECK(s.size() >= 2, "fan_in: a weight needs at least 2 dimensions, got " << shape_str(s));
  int64_t f = s[1];
  for (size_t i = 2; i < s.size(); ++i) f *= s[i];
  return f;
}

void uniform_(const Variable& v, double lo, double hi, Generator& gen) {
  Tensor t = v.data();  // a handle: filling it fills the variable
  fill_uniform(t, lo, hi, gen);
}

void normal_(const Variable& v, double mean, double std, Generator& gen) {
  Tensor t = v.data();
  fill_normal(t, mean, std, gen);
}

void constant_(const Variable& v, double value) {
  Tensor t = v.data();
  t.fill_(value);
}

void zeros_(const Variable& v) { constant_(v, 0.0); }
void ones_(const Variable& v) { constant_(v, 1.0); }

void kaiming_uniform_(const Variable& v, double a, Generator& gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(v.shape())));
  uniform_(v, -bound, bound, gen);
}

}  // namespace tandem::nn::init
