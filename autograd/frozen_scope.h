// FrozenScope: freezes parameters for a scope, as hand-written GAN loops freeze D in the G
// step (MMGeneration's set_requires_grad(D, False), StyleGAN's requires_grad_(False)).
//
// Contract: construction sets requires_grad false on every given parameter (leaves) and
// destruction restores each one's own earlier value, also when the scope is left by an
// exception. Ops run inside record no edge to them, so a backward of a graph built there
// neither computes nor accumulates their gradients, and a Reducer scopes its sync to the
// rest. Freezing and unfreezing every step is cheap: a Reducer's phase for each used set
// is cached, so it costs no rebuild and no warning. Scoping the backward instead
// (backward({.inputs = ...}), engine.h) needs no freeze at all.
#pragma once

#include <vector>

#include "autograd/module.h"
#include "autograd/variable.h"

namespace tandem {

class FrozenScope {
 public:
  explicit FrozenScope(std::vector<Variable> params);
  explicit FrozenScope(const nn::Module& module) : FrozenScope(module.parameters()) {}
  ~FrozenScope();
  FrozenScope(const FrozenScope&) = delete;
  FrozenScope& operator=(const FrozenScope&) = delete;

 private:
  std::vector<Variable> params_;
  std::vector<bool> was_;
};

}  // namespace tandem
