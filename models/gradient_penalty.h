// Gradient penalties of a GAN's critic: WGAN-GP on interpolates, R1 on reals and R2 on fakes.
//
// Contract:
// - interpolate(real, fake, mix) is x^ = mix_i * real_i + (1 - mix_i) * fake_i for each
//   sample i (row of the leading axis), mix of shape [N] (or [N, 1]) with values in [0, 1].
//   It returns a new leaf that requires grad and has no history to real or fake.
// - wgan_gp_penalty(critic_out, x) is mean_i (||grad_x D(x)_i|| - 1)^2 and r1_penalty
//   (critic_out, x) is mean_i ||grad_x D(x)_i||^2, where critic_out = D(x) has one row per
//   critic sample and x is a leaf that requires grad. R2 (R3GAN) is r1_penalty taken on
//   fake samples: x a detached copy of them that requires grad. The rows of x are split
//   evenly over the critic's samples (a critic that judges packs of k rows has N / k samples), and
//   sample i's gradient is the gradient of sum(D(x)) with respect to its rows: exact for
//   any critic in which a sample's output depends on that sample alone. A critic with batch
//   norm breaks that (and has no second-order rule): refuse it with
//   check_critic_for_penalty.
// - The inner gradient is a grad() with create_graph (autograd/grad.h): no .grad is
//   touched and no Reducer sees it. The returned penalty carries history to the critic's
//   parameters through the second-order graph, so the backward of a loss that includes it
//   (the only one a Reducer synchronises) gives the parameters the penalty's gradient.
// - The mean is over this rank's samples: with equal slices on every rank, the average
//   over ranks that the Reducer takes is the mean over the global batch.
// - check_critic_for_penalty(critic, model, what) throws an Error naming the model, the
//   first batch-norm module in the critic and `what` (the loss or flag asking for the
//   penalty) when the critic has batch norm.
#pragma once

#include <string>

#include "autograd/module.h"
#include "autograd/variable.h"
#include "runtime/tensor.h"

namespace tandem::models {

Variable interpolate(const Tensor& real, const Tensor& fake, const Tensor& mix);
Variable wgan_gp_penalty(const Variable& critic_out, const Variable& x);
Variable r1_penalty(const Variable& critic_out, const Variable& x);
void check_critic_for_penalty(nn::Module& critic, const std::string& model, const std::string& what);

}  // namespace tandem::models
