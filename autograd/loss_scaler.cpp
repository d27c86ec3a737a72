#include "autograd/loss_scaler.h"

#include <cmath>

#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/non_finite.h"
#include "runtime/error.h"

namespace tandem::optim {

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  TANDEM_CHECK(options_.init_scale > 0 && std::isfinite(options_.init_scale),
               "LossScaler: init_scale " << options_.init_scale << " is not a positive finite number");
  TANDEM_CHECK(options_.growth_factor > 1 && std::isfinite(options_.growth_factor),
               "LossScaler: growth_factor " << options_.growth_factor << " must be finite and above 1");
  TANDEM_CHECK(options_.backoff_factor > 0 && options_.backoff_factor < 1,
               "LossScaler: backoff_factor " << options_.backoff_factor << " must be in (0, 1)");
  TANDEM_CHECK(options_.growth_interval >= 1,
               "LossScaler: growth_interval " << options_.growth_interval << " must be at least 1");
  state_ = {Tensor::from_values({1}, {options_.init_scale}, DType::f64),
            Tensor::from_values({1}, {0.0}, DType::i64), Tensor::from_values({1}, {0.0}, DType::i64)};
}

double LossScaler::scale() const { return state_[0].data<double>()[0]; }
int64_t LossScaler::growth_tracker() const { return state_[1].data<int64_t>()[0]; }
int64_t LossScaler::skipped_steps() const { return state_[2].data<int64_t>()[0]; }

Variable LossScaler::scale_loss(const Variable& loss) const { return tandem::scale(loss, scale()); }

bool LossScaler::unscale_(const std::vector<Variable>& params) const {
  const double inverse = 1.0 / scale();
  bool finite = true;
  for (const Variable& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    kernels::scale_(g, inverse);
    finite = kernels::all_finite(g) && finite;
  }
  return finite;
}

void LossScaler::update(bool found_inf) {
  double& s = state_[0].data<double>()[0];
  int64_t& tracker = state_[1].data<int64_t>()[0];
  if (found_inf) {
    s *= options_.backoff_factor;
    tracker = 0;
    ++state_[2].data<int64_t>()[0];
    return;
  }
  if (++tracker == options_.growth_interval) {
    const double grown = s * options_.growth_factor;
    if (std::isfinite(grown)) s = grown;
    tracker = 0;
  }
}

}  // namespace tandem::optim
