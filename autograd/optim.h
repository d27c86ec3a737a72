// Optimizers with PyTorch semantics: SGD (momentum, dampening, Nesterov, L2 weight decay),
// Adam (bias correction, L2 weight decay added to the gradient) and AdamW (decoupled
// weight decay).
//
// Contract:
// - An optimizer holds the parameter Variables it was given (in that order; no repeats)
//   and one learning rate (lr()/set_lr()). step() updates, in place and under no autograd,
//   every parameter whose grad is defined; a parameter without a grad is skipped and its
//   state (step count, moments) left as it was. zero_grad(set_to_none) clears or zeroes
//   the gradients of its parameters.
// - Per-parameter state is indexed by the parameter's position. state_dict() returns
//   "lr" (a 0-d float64 tensor), and for each parameter i that has state
//   "state.<i>.step" (0-d float64) and its moment tensors ("state.<i>.momentum_buffer" for
//   SGD, "state.<i>.exp_avg" and "state.<i>.exp_avg_sq" for Adam/AdamW), as handles on
//   the live state (clone to snapshot), and "initial_lr" once a learning-rate schedule has
//   fixed the optimizer's base rate (initial_lr(); PyTorch's param_groups' 'initial_lr'):
//   restored with the rest, it makes a schedule built after loading a checkpoint start
//   from the run's base rate, not from the scheduled rate the checkpoint holds in "lr".
//   load_state_dict() checks every entry first (index
//   in range, known key, shape equal to the parameter's) and throws an Error naming the
//   entry, the parameter and both shapes; then it copies.
// - Updates (g = grad, p = parameter, t = step count after increment):
//   SGD:   g += wd p; if momentum: b = g on the first step, else b = momentum b + (1 - dampening) g;
//          g = nesterov ? g + momentum b : b; p -= lr g.
//   Adam:  g += wd p; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//          p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
//   AdamW: p *= 1 - lr wd first, then Adam's update without the wd term.
// - Parameters are float32 or float64, on the CPU or (CUDA builds) a GPU. step() checks
//   every parameter first, then updates them with the fused kernels of kernels/optim.h,
//   one call per group of parameters sharing device, dtype and step count.
// - steps_taken_on_this_thread() counts every step() call of every optimizer on the
//   calling thread (ranks that run as threads each count their own), except those inside a
//   LocalBackwardScope (a rank's work alone). The Reducer sends it with each agreement, so
//   a rank that stepped when the others did not is caught.
// - CUDA graphs (runtime/step_capture.h, runtime/cuda/cuda_graph.h): a step() captured
//   into a graph updates the same parameters at every replay (those with a gradient at
//   the capture), with the learning rate and step counts of the replay's own moment: its
//   kernels read their per-step constants from a device array that each launch refreshes
//   from lr() and the step counts, which each replay advances as step() would (and the
//   thread's steps_taken_on_this_thread). So N replays equal N eager steps bit for bit,
//   and a schedule's set_lr between replays applies. The optimizer must outlive the graph
//   (and not load_state_dict while it exists). A parameter's first step (its moments or
//   momentum buffer made) cannot be captured (replays would repeat it): an Error.
// - Options are plain structs: optim::Adam opt(params, {.lr = 2e-4, .betas = {0.5, 0.999}}).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autograd/module.h"
#include "autograd/variable.h"
#include "runtime/step_capture.h"

namespace tandem::optim {

int64_t steps_taken_on_this_thread();

class Optimizer {
 public:
  Optimizer(std::vector<Variable> params, double lr, const char* name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  void set_lr(double lr);
  // The base rate a learning-rate schedule scales (autograd/lr_scheduler.h); none until a
  // schedule is attached or a state_dict holding one is loaded.
  std::optional<double> initial_lr() const { return initial_lr_; }
  void set_initial_lr(double lr);
  const std::vector<Variable>& params() const { return params_; }
  // The step count of parameter i (0 before its first update).
  int64_t step_count(size_t i) const { return state_.at(i).step; }

  StateDict state_dict() const;
  // Restores a state_dict(). Refused, naming every problem and changing nothing: an
  // unexpected, missing or misshapen entry (every parameter with a step count must have
  // all of its optimizer's moments, and each moment its step count; 'lr' is required), a
  // learning rate that is not a positive finite number, a step count that is not a
  // non-negative integer, a moment holding NaN or Inf, a negative second moment.
  void load_state_dict(const StateDict& state);
  // The checks load_state_dict makes before it changes anything: throws the same Error.
  void check_state_dict(const StateDict& state) const;

 protected:
  struct ParamState {
    int64_t step = 0;
    std::map<std::string, Tensor> tensors;  // moments, same shape as the parameter
  };
  // An entry "state.<index>.<key>" of a state_dict being loaded.
  struct StateEntry {
    size_t index;
    std::string key;
    const Tensor* tensor;
  };
  // Every state.* entry of `state`, once the whole of it has passed load_state_dict's checks.
  std::vector<StateEntry> checked_state_entries(const StateDict& state) const;
  // The parameter's name for messages ("#3" when it has none).
  std::string param_label(size_t i) const;
  // Checks a parameter that is about to be updated (device, dtype, grad).
  void check_updatable(size_t i) const;
  // In a captured step: replays advance the step counts this step() advances.
  void advance_on_replay(StepCapture& capture);
  // Parameter i's state is about to be made: an Error inside a capture (replays would reset it).
  void check_state_exists(const StepCapture* capture, size_t i) const;
  // The moments a parameter holds once it has been updated (none for plain SGD).
  virtual std::vector<std::string> moment_keys() const { return {}; }

  std::vector<Variable> params_;
  std::vector<ParamState> state_;
  double lr_;
  std::optional<double> initial_lr_;
  const char* name_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<Variable> params, SGDOptions options = {});
  void step() override;
  const SGDOptions& options() const { return options_; }  // options().lr is the initial lr

 protected:
  std::vector<std::string> moment_keys() const override;

 private:
  SGDOptions options_;
};

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2: added to the gradient
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
};

class Adam : public Optimizer {
 public:
  explicit Adam(std::vector<Variable> params, AdamOptions options = {});
  void step() override;
  const AdamOptions& options() const { return options_; }  // options().lr is the initial lr

 protected:
  Adam(std::vector<Variable> params, AdamOptions options, bool decoupled, const char* name);
  std::vector<std::string> moment_keys() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  AdamOptions options_;
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Variable> params, AdamWOptions options = {});
};

}  // namespace tandem::optim
