#include "reducer/optim_wrapper.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/clip_grad.h"
#include "autograd/engine.h"
#include "autograd/ops.h"
#include "runtime/trace.h"

namespace tandem {

OptimWrapper::OptimWrapper(std::shared_ptr<optim::Optimizer> optimizer, int accumulative_counts,
                           ClipGrad clip_grad)
    : optimizer_(std::move(optimizer)), accumulative_counts_(accumulative_counts), clip_grad_(clip_grad) {
  TANDEM_CHECK(optimizer_ != nullptr, "OptimWrapper: no optimizer");
  TANDEM_CHECK(accumulative_counts_ >= 1,
               "OptimWrapper: accumulative_counts must be at least 1, got " << accumulative_counts_);
  TANDEM_CHECK(
      clip_grad_.max_norm >= 0 && std::isfinite(clip_grad_.max_norm),
      "OptimWrapper: clip_grad.max_norm must be a finite number >= 0 (0: off), got " << clip_grad_.max_norm);
  TANDEM_CHECK(clip_grad_.norm_type == 2.0 || clip_grad_.norm_type == std::numeric_limits<double>::infinity(),
               "OptimWrapper: clip_grad.norm_type must be 2 or infinity, got " << clip_grad_.norm_type);
}

void OptimWrapper::zero_grad() { optimizer_->zero_grad(); }

void OptimWrapper::backward(const Variable& loss) { loss.backward(); }

void OptimWrapper::step() {
  ++steps_attempted_;
  bool non_finite = false;
  for (Reducer* r : reducers_) non_finite = r->take_non_finite() || non_finite;
  if (scaler_) non_finite = !scaler_->unscale_(optimizer_->params()) || non_finite;
  if (non_finite) {
    ++skipped_steps_;
    if (scaler_) scaler_->update(/*found_inf=*/true);
    return;
  }
  if (clip_grad_.max_norm > 0)
    last_grad_norm_ = clip_grad_norm_(optimizer_->params(), clip_grad_.max_norm, clip_grad_.norm_type);
  {
    trace::Span span("optim", "optimizer step");
    optimizer_->step();
  }
  if (scaler_) scaler_->update(/*found_inf=*/false);
}

void OptimWrapper::attach(Reducer* reducer) {
  if (std::find(reducers_.begin(), reducers_.end(), reducer) == reducers_.end()) reducers_.push_back(reducer);
}

void OptimWrapper::initialize_count_status(int64_t calls_done, int64_t max_calls, bool after_step) {
  TANDEM_CHECK(calls_done >= 0 && max_calls >= calls_done,
               "OptimWrapper::initialize_count_status: calls_done "
                   << calls_done << " and max_calls " << max_calls
                   << " must satisfy 0 <= calls_done <= max_calls");
  TANDEM_CHECK(after_step || calls_done % accumulative_counts_ == 0,
               "OptimWrapper::initialize_count_status: calls_done "
                   << calls_done << " is not a multiple of accumulative_counts " << accumulative_counts_
                   << ": the gradients accumulated before it are in no checkpoint; resume at a multiple of "
                   << accumulative_counts_ << ", or pass after_step = true if the state was saved right "
                   << "after an optimizer step (the end of a run whose length is not a multiple)");
  calls_ = calls_done;
  max_calls_ = max_calls;
  first_call_ = calls_done;
  remainder_ = static_cast<int>((max_calls - calls_done) % accumulative_counts_);
}

int OptimWrapper::loss_factor() const {
  const bool in_last_partial = remainder_ > 0 && calls_ >= max_calls_ - remainder_ && calls_ < max_calls_;
  return in_last_partial ? remainder_ : accumulative_counts_;
}

void OptimWrapper::update_params(const Variable& loss) {
  const int factor = loss_factor();
  // With a loss scaler, its scale too (the same for every call of one accumulation: it
  // changes at the step).
  const double multiplier = scaler_ ? scaler_->scale() / factor : 1.0 / factor;
  Variable scaled = multiplier == 1.0 ? loss : scale(loss, multiplier);
  bool boundary = should_sync();
  ++calls_;
  if (boundary) {
    scaled.backward({.inputs = backward_inputs()});
    step();
    zero_grad();
    return;
  }
  std::vector<std::unique_ptr<Reducer::NoSyncGuard>> guards;
  for (Reducer* r : reducers_) guards.push_back(std::make_unique<Reducer::NoSyncGuard>(*r));
  scaled.backward({.inputs = backward_inputs()});
}

std::vector<Variable> OptimWrapper::backward_inputs() const {
  std::vector<Variable> inputs;
  for (const Variable& p : optimizer_->params()) {
    if (p.requires_grad()) inputs.push_back(p);
  }
  return inputs;
}

void OptimWrapperDict::add(const std::string& name, std::shared_ptr<OptimWrapper> wrapper) {
  TANDEM_CHECK(wrapper != nullptr, "OptimWrapperDict: null wrapper for '" << name << "'");
  wrappers_[name] = std::move(wrapper);
}

OptimWrapper& OptimWrapperDict::operator[](const std::string& name) {
  auto it = wrappers_.find(name);
  if (it == wrappers_.end()) {
    std::string keys;
    for (const auto& [k, v] : wrappers_) keys += (keys.empty() ? "" : ", ") + k;
    TANDEM_FAIL("OptimWrapperDict has no optimizer wrapper '" << name << "' (it has: " << keys << ")");
  }
  return *it->second;
}

}  // namespace tandem
