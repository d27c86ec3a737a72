// Learning-rate schedules by iteration (MMEngine's parameter schedulers LinearLR,
// CosineAnnealingLR, StepLR and MultiStepLR, with by_epoch=False).
//
// Contract:
// - An LrSchedule is an optional linear warm-up times at most one decay, both counted in
//   iterations from 0 (the decay does not wait for the warm-up to end: as MMEngine's
//   schedulers that are active together, their factors multiply). The learning rate of
//   iteration i is base_lr * factor(i), with factor(i) = warmup(i) * decay(i):
//     warmup:N[:F]        F + (1 - F) * i / N for i < N, then 1 (F: start factor, 0.001)
//     cosine:T[:M]        M + (1 - M) * (1 + cos(pi * min(i, T) / T)) / 2 (M: the final
//                         factor, a fraction of base_lr, 0), then M from iteration T on
//     step:S[:G]          G^floor(i / S) (G: gamma, 0.1)
//     multistep:A,B,..[:G] G^(the number of milestones A, B, .. that are <= i) (G: 0.1)
//     constant            1 (no schedule)
//   A spec is one of these or a warm-up and a decay joined by '+' ("warmup:500+cosine:20000").
// - parse_lr_schedule(spec) reads that syntax; anything else (an unknown name, two decays,
//   two warm-ups, a count below 1, a factor outside (0, 1] for F or [0, 1) for M, a gamma
//   outside (0, 1], milestones not increasing) is an Error quoting the spec and saying what
//   is expected. str() is the canonical spec (defaults written out, numbers in shortest
//   round-trip form): two specs mean the same schedule exactly when their str() are equal.
// - factor(i) is a pure function of i (no state), so a run resumed at iteration i continues
//   with the very learning rates of an uninterrupted one: what a checkpoint must hold of the
//   schedule is its spec and the iteration.
// - LrScheduler(optimizers, schedule) scales each optimizer's base rate, its initial_lr()
//   (autograd/optim.h): the one an earlier schedule or a loaded state_dict fixed, else its
//   current lr(), which becomes its initial_lr() (PyTorch's setdefault('initial_lr')). So a
//   scheduler built before or after loading a checkpoint resumes with the same rates: the
//   optimizer's state_dict carries the base, not just the scheduled rate of the moment.
//   LrScheduler(optimizers, schedule, base_lrs) takes the bases explicitly (one per
//   optimizer, positive and finite) and makes them the optimizers' initial_lr(). Either sets
//   every optimizer's lr to base * factor(0).
// - set_iteration(i) sets every optimizer's lr to base * factor(i). lr_at(base, i) is that
//   value; scheduled_lr(optimizer, i) is the rate set_iteration(i) gives one of its
//   optimizers (nullopt for another optimizer).
// - state_dict() holds "base_lr.<k>" per optimizer and "iteration" (the last
//   set_iteration); load_state_dict() checks the count and values first (an Error naming the
//   entry), then restores the bases (and the optimizers' initial_lr) and sets that iteration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autograd/optim.h"

namespace tandem::optim {

struct LrSchedule {
  enum class Decay { none, cosine, step, multistep };

  int64_t warmup_iters = 0;  // 0: no warm-up
  double warmup_start_factor = 0.001;
  Decay decay = Decay::none;
  int64_t cosine_iters = 0;
  double cosine_min_factor = 0.0;
  int64_t step_size = 0;
  std::vector<int64_t> milestones;
  double gamma = 0.1;  // step and multistep

  double factor(int64_t iteration) const;
  double lr_at(double base_lr, int64_t iteration) const { return base_lr * factor(iteration); }
  std::string str() const;
};

LrSchedule parse_lr_schedule(const std::string& spec);

class LrScheduler {
 public:
  LrScheduler(std::vector<Optimizer*> optimizers, LrSchedule schedule);
  LrScheduler(std::vector<Optimizer*> optimizers, LrSchedule schedule, std::vector<double> base_lrs);

  void set_iteration(int64_t iteration);
  int64_t iteration() const { return iteration_; }
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // The checks load_state_dict makes before it changes anything: throws the same Error.
  void check_state_dict(const StateDict& state) const;
  std::optional<double> scheduled_lr(const Optimizer& optimizer, int64_t iteration) const;
  const LrSchedule& schedule() const { return schedule_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

 private:
  struct SavedState {
    std::vector<double> base_lrs;
    int64_t iteration = 0;
  };
  SavedState checked_state(const StateDict& state) const;

  std::vector<Optimizer*> optimizers_;
  std::vector<double> base_lrs_;
  LrSchedule schedule_;
  int64_t iteration_ = 0;
};

}  // namespace tandem::optim
