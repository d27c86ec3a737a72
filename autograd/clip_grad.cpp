#include "autograd/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/elementwise.h"
#include "runtime/error.h"

namespace tandem {

namespace {

void check_norm_type(double norm_type) {
  TANDEM_CHECK(norm_type == 2.0 || norm_type == std::numeric_limits<double>::infinity(),
               "gradient clipping: norm_type must be 2 or infinity, got " << norm_type);
}

}  // namespace

double grad_norm(const std::vector<Variable>& params, double norm_type) {
  check_norm_type(norm_type);
  const bool inf = std::isinf(norm_type);
  double acc = 0.0;  // sum of squares, or the largest magnitude
  for (const Variable& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    // On the host in float64, in a fixed order: the same bits on every rank.
    for (double x : g.to(Device::cpu()).to_vector()) acc = inf ? std::max(acc, std::fabs(x)) : acc + x * x;
  }
  return inf ? acc : std::sqrt(acc);
}

double clip_grad_norm_(const std::vector<Variable>& params, double max_norm, double norm_type) {
  TANDEM_CHECK(max_norm > 0 && std::isfinite(max_norm),
               "gradient clipping: max_norm must be a positive finite number, got " << max_norm);
  const double norm = grad_norm(params, norm_type);
  const double coef = max_norm / (norm + 1e-6);
  if (!std::isfinite(norm) || coef >= 1.0) return norm;
  for (const Variable& p : params) {
    Tensor g = p.grad();
    if (g.defined()) kernels::scale_(g, coef);
  }
  return norm;
}

}  // namespace tandem
