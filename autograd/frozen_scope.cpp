#include "autograd/frozen_scope.h"

namespace tandem {

FrozenScope::FrozenScope(std::vector<Variable> params) : params_(std::move(params)) {
  for (Variable& p : params_) {
    was_.push_back(p.requires_grad());
    p.set_requires_grad(false);
  }
}

FrozenScope::~FrozenScope() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].set_requires_grad(was_[i]);
}

}  // namespace tandem
