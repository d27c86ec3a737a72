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
// - inner_scale (a loss scale, loss_scaler.h; 1: off) is PyTorch AMP's recipe for a penalty
//   under a loss scale: the inner gradient is taken of sum(D(x)) x inner_scale, so that
//   its backward runs on values as large as the outer backward's, and divided by
//   inner_scale again before the norms. With a power of two that changes nothing where
//   nothing underflows or overflows: in float32 the penalty is bitwise the unscaled one. In
//   float16 (autograd/precision.h) it keeps the inner backward's small gradients from
//   flushing to zero, and a scale too large for it gives an infinite penalty, whose
//   non-finite gradients the scaler skips and backs off on. 1 (the default) runs it
//   unscaled: the recipe MMagic's StyleGAN2 trained stably with (GanObjective says which).
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
Variable wgan_gp_penalty(const Variable& critic_out, const Variable& x, double inner_scale = 1.0);
Variable r1_penalty(const Variable& critic_out, const Variable& x, double inner_scale = 1.0);
void check_critic_for_penalty(nn::Module& critic, const std::string& model, const std::string& what);

}  // namespace tandem::models
