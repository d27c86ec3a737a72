// The optimizer wrappers of the GanModel oracle suites (mlp GAN, N ranks = one process).
//
// Contract: sgd_wrappers(gan) gives "generator" and "discriminator" an OptimWrapper around
// SGD (lr 0.05, momentum 0.5) over that part's parameters. SGD, not Adam: Adam's first
// steps are lr * sign(gradient), which turns the rounding noise of gradients that cancel to
// about 0 into differences of lr between summation orders. parameters_of(gan) clones every
// parameter's value, in order.
#pragma once

#include <memory>
#include <vector>

#include "autograd/optim.h"
#include "models/gan.h"
#include "reducer/ddp.h"

namespace tandem::testing {

inline OptimWrapperDict sgd_wrappers(const models::GanModel& gan) {
  const optim::SGDOptions sgd{.lr = 0.05, .momentum = 0.5};
  OptimWrapperDict wrappers;
  wrappers.add("generator", std::make_shared<OptimWrapper>(
                                std::make_shared<optim::SGD>(gan.generator->parameters(), sgd)));
  wrappers.add("discriminator", std::make_shared<OptimWrapper>(
                                    std::make_shared<optim::SGD>(gan.discriminator->parameters(), sgd)));
  return wrappers;
}

inline std::vector<Tensor> parameters_of(const models::GanModel& gan) {
  std::vector<Tensor> out;
  for (const Variable& p : gan.parameters()) out.push_back(p.data().clone());
  return out;
}

}  // namespace tandem::testing
