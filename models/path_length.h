// StyleGAN2's path-length regularisation (Karras et al. 2020, section 3.2, with the official
// code's semantics), written so that N ranks equal one process on the global batch.
//
// Contract:
// - path_length_penalty(images, ws, noise, pl_mean, decay, group) takes the generator's
//   images [n, C, H, W], the per-layer latents ws [n, L, w_dim] they were made from (a
//   Variable with history that the images depend on; models/stylegan2.h) and this rank's
//   rows of a N(0, 1) draw of the images' shape. With y = noise / sqrt(H * W), each sample's
//   path length is l_i = sqrt(mean over L of sum over w_dim of (d sum(images * y) / d ws)^2)
//   (a grad() with create_graph: the penalty differentiates through it).
// - The running mean: m = pl_mean + decay * (mean of l over the global batch - pl_mean),
//   the global mean summed over `group` (one host allreduce of two numbers; no group: this
//   process's batch is the global batch). pl_mean is overwritten with m, so every rank
//   holds the same value (the model keeps it as a buffer: checkpointed, broadcast).
// - The value is the penalty, mean_i (l_i - m)^2. The loss to differentiate is the official
//   code's (l_i - m)^2 with m itself differentiable through the batch mean, which couples
//   every sample of the global batch. Its gradient with respect to l_i is
//   2 (l_i - m) / N - 2 decay (mean(l) - m) / N, and the loss returned,
//   mean_i (l_i - m)^2 - 2 decay (global mean - m) * mean_i l_i with m and the global mean
//   constants, has that gradient on every rank's samples once the Reducer averages over
//   ranks: the same step as one process on the global batch.
// - The caller scales the loss (StyleGAN2: pl_weight times the lazy interval).
// - Errors name the shapes: images not 4-d, ws not 3-d or with another batch, noise not of
//   the images' shape.
#pragma once

#include "autograd/variable.h"
#include "runtime/dist/process_group.h"

namespace tandem::models {

struct PathLengthTerm {
  Variable loss;         // to differentiate (see the contract)
  double penalty = 0.0;  // mean_i (l_i - m)^2, this rank's samples
  double mean = 0.0;     // m, the running mean after this update
};

PathLengthTerm path_length_penalty(const Variable& images, const Variable& ws, const Tensor& noise,
                                   Tensor& pl_mean, double decay, dist::ProcessGroup* group);

}  // namespace tandem::models
