// OptimWrapper and OptimWrapperDict, as in MMEngine.
//
// Contract: an OptimWrapper owns an optimizer and an accumulation count k (default 1).
// update_params(loss) runs backward on loss / k and, every k-th call, steps the optimizer
// and zeroes the gradients. That backward is given the optimizer's parameters that
// require grad as inputs (backward_inputs(); engine.h): it computes and synchronises only
// what this optimizer steps, so a GAN's G update leaves D's gradients alone (not computed,
// not averaged, .grad untouched). backward(loss) is MMEngine's plain loss.backward().
// Between those calls the backward runs inside no_sync() of the Reducers the wrapper is
// attached to (a DDP wrapper attaches them), so gradients accumulate locally and are
// averaged once, at the step. A run whose length is not a
// multiple of k says so with initialize_count_status(done, max) (MMEngine's): its last,
// partial accumulation steps at the run's last call, with the loss divided by the count
// of calls it holds (max % k), so that it is the mean over those micro-batches. Callers
// that zero gradients themselves do it only when !accumulating(). zero_grad/backward/step are
// also callable one by one. step() is skipped (and counted) when an attached Reducer
// with the skip_step non-finite policy averaged a NaN/Inf since the last step; the
// verdict is the same on every rank, so all ranks skip together.
// Clipping (ClipGrad, MMEngine's clip_grad; off unless max_norm > 0): step() clips the
// gradients of the optimizer's parameters with clip_grad_norm_ (autograd/clip_grad.h:
// norm type 2 or infinity) right before the optimizer steps, that is on the averaged
// gradients (a Reducer has written them back by then). Every rank holds the same averaged
// gradients and computes the norm locally in a fixed order, so every rank clips by the
// same, bitwise-equal norm: no collective is added. last_grad_norm() is the norm before
// clipping at the latest step that clipped (nullopt before one, or when clipping is off);
// a step skipped for non-finite gradients clips nothing.
// A loss scaler (set_loss_scaler; autograd/loss_scaler.h, for fp16): update_params
// multiplies the loss by its scale (with the accumulation's 1/k), and step() first divides
// the averaged gradients by it; when they are not all finite the step is skipped and counted
// like the Reducer's (every rank holds the same averages, so every rank skips), and the scale
// backs off; after a step taken it grows as the scaler's interval says. The Reducer's
// non-finite policy acts first, in the backward, on the scaled averages: skip_step agrees
// with the scaler (one skip, one back-off), stop ends the run at the first overflow, and
// scrub hides overflows from the scaler (its scale then never backs off): keep it off or
// skip_step with a scaler. backward(loss) backs the loss as given (scale it with the
// scaler's scale_loss first).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/loss_scaler.h"
#include "autograd/optim.h"
#include "autograd/variable.h"
#include "reducer/reducer.h"

namespace tandem {

struct ClipGrad {
  double max_norm = 0.0;   // 0: no clipping
  double norm_type = 2.0;  // 2 or std::numeric_limits<double>::infinity()
};

class OptimWrapper {
 public:
  // An Error names a bad accumulative_counts, max_norm (negative, not finite) or norm_type.
  explicit OptimWrapper(std::shared_ptr<optim::Optimizer> optimizer, int accumulative_counts = 1,
                        ClipGrad clip_grad = {});

  void zero_grad();
  void backward(const Variable& loss);
  void step();
  void update_params(const Variable& loss);
  // The parameters update_params' backward writes: the optimizer's that require grad now.
  std::vector<Variable> backward_inputs() const;
  // The run has made `calls_done` update_params calls and makes `max_calls` in all.
  // calls_done must be a multiple of k (what was accumulated before is in no checkpoint),
  // unless `after_step`: the state was saved right after an optimizer step (the end of an
  // earlier run whose length was not a multiple of k, or one with another k); the
  // accumulations then count from calls_done.
  void initialize_count_status(int64_t calls_done, int64_t max_calls, bool after_step = false);
  // True when the next update_params call is an accumulation boundary (it steps): every
  // k-th call, and the run's last.
  bool should_sync() const { return ends_accumulation(calls_ + 1); }
  // True while update_params calls since the last step wait for it (their gradients are
  // accumulated: zero_grad now would drop them).
  bool accumulating() const { return !ends_accumulation(calls_); }

  void attach(Reducer* reducer);
  const std::vector<Reducer*>& reducers() const { return reducers_; }  // those attached
  optim::Optimizer& optimizer() { return *optimizer_; }
  int accumulative_counts() const { return accumulative_counts_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  // step() calls so far, taken or skipped: the accumulation boundaries reached.
  int64_t steps_attempted() const { return steps_attempted_; }
  const ClipGrad& clip_grad() const { return clip_grad_; }
  void set_loss_scaler(std::shared_ptr<optim::LossScaler> scaler) { scaler_ = std::move(scaler); }
  optim::LossScaler* loss_scaler() const { return scaler_.get(); }
  std::optional<double> last_grad_norm() const { return last_grad_norm_; }

 private:
  bool ends_accumulation(int64_t calls) const {
    return (calls - first_call_) % accumulative_counts_ == 0 || calls == max_calls_;
  }
  // What the next update_params divides its loss by: k, or the calls of the run's last,
  // partial accumulation.
  int loss_factor() const;

  std::shared_ptr<optim::Optimizer> optimizer_;
  int accumulative_counts_;
  int64_t calls_ = 0;
  int64_t max_calls_ = -1;  // unknown until initialize_count_status
  int remainder_ = 0;       // (max_calls_ - first_call_) % k
  int64_t first_call_ = 0;  // where the accumulations start counting
  int64_t skipped_steps_ = 0;
  int64_t steps_attempted_ = 0;
  ClipGrad clip_grad_;
  std::optional<double> last_grad_norm_;
  std::shared_ptr<optim::LossScaler> scaler_;  // none: fp32's plain steps
  std::vector<Reducer*> reducers_;
};

class OptimWrapperDict {
 public:
  void add(const std::string& name, std::shared_ptr<OptimWrapper> wrapper);
  OptimWrapper& operator[](const std::string& name);  // throws naming the missing key
  bool contains(const std::string& name) const { return wrappers_.count(name) != 0; }
  const std::map<std::string, std::shared_ptr<OptimWrapper>>& items() const { return wrappers_; }

 private:
  std::map<std::string, std::shared_ptr<OptimWrapper>> wrappers_;
};

}  // namespace tandem
