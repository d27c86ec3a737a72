// SyncBatchNorm: batch normalisation whose training-mode statistics cover the batch of
// every rank of a process group, so that N ranks each on a slice of a global batch compute
// what one process computes with BatchNorm on the whole batch.
//
// Contract:
// - Training forward: each rank computes its per-channel mean, sum of squared deviations
//   and element count (N, N * L or N * H * W; 0 for an empty batch) in float64, whatever
//   the input's dtype, and all-gathers them (one float64 allgather_flat of 2C + 1 values);
//   every rank combines them in double into the global mean and biased variance,
//   normalises its own slice with them, and updates running_mean and running_var as one
//   process on the global batch would (unbiased variance for running_var,
//   r = (1 - momentum) r + momentum * batch). A rank with an empty batch still takes part
//   (count 0) and gets an empty output, as long as the global batch has 2 values per
//   channel; a global count below 2 is an Error naming the module (the unbiased variance
//   needs two values per channel).
// - Backward: when the input needs a gradient, each rank sums grad and grad * xhat per
//   channel in float64 and the two sums are all-reduced (one float64 allreduce of 2C
//   values); dx uses the global sums (formed in float64, returned in x's dtype). gamma and
//   beta get this rank's own sums, as BatchNorm's would on this slice: the Reducer (or the
//   caller) sums or averages them over the ranks like any other parameter gradient. With
//   the loss of rank r being L_r, the gradients are those of sum_r L_r on one process
//   (averaged by the Reducer: of the mean).
// - Eval mode uses the running statistics and communicates nothing, as BatchNorm does;
//   without running statistics (track_running_stats = false) it normalises with this
//   rank's own batch, as PyTorch's SyncBatchNorm does in eval mode.
// - The collectives are the group's: the MPI group with CPU tensors, the NCCL group with
//   CUDA tensors (the statistics are staged through the host, 2C + 1 values per call).
// - Every training forward and every backward through it is its own collective, tagged
//   with the module's path ("SyncBatchNorm 'generator.2' forward"). Every rank must make
//   the same calls in the same order. A GAN step that calls D twice (on fakes, then on
//   real images) makes two forward collectives per SyncBatchNorm of D, and its backward
//   one per call that the loss reaches, in the engine's order, which is the same on every
//   rank when every rank runs the same step. A rank that skips a call (a D evaluated only
//   on some ranks, a loss that reaches the layer on some ranks only, a no_grad forward on
//   some) leaves the others waiting: they stop at the group's timeout with an Error naming
//   the tag, never hang.
// - nn::SyncBatchNorm is a BatchNorm1d/2d built synchronised (BatchNormOptions as theirs:
//   affine = false leaves gamma and beta out, track_running_stats = false the buffers);
//   convert_sync_batchnorm turns every BatchNorm of a module tree into one in place
//   (parameters, buffers, optimizers built on them and checkpoints stay valid; type_name()
//   becomes "SyncBatchNorm2d(64)") and returns how many it converted. Convert before the
//   first training forward.
// - Within a LocalBatchStatsScope (on this thread) SyncBatchNorm normalises with this
//   rank's batch alone, as BatchNorm, and communicates nothing: for work one rank does on
//   its own (rank 0's sample pictures), which would otherwise wait for the others.
#pragma once

#include <memory>

#include "autograd/nn.h"
#include "runtime/dist/process_group.h"

namespace tandem {

// The training-mode functional form: x [N, C], [N, C, L] or [N, C, H, W] (N may be 0 on
// some ranks, when another has data);
// gamma and beta may be undefined; running stats updated when defined. `name` goes into
// the collectives' tags and the error messages.
Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, Tensor& running_mean,
                         Tensor& running_var, double momentum, double eps,
                         const std::shared_ptr<dist::ProcessGroup>& group, const std::string& name);

namespace nn {

class LocalBatchStatsScope {
 public:
  LocalBatchStatsScope();
  ~LocalBatchStatsScope();
  LocalBatchStatsScope(const LocalBatchStatsScope&) = delete;
  LocalBatchStatsScope& operator=(const LocalBatchStatsScope&) = delete;
  static bool active();

 private:
  bool previous_;
};

class SyncBatchNorm : public BatchNorm {
 public:
  // input_dim: 2 or 3 for [N, C] and [N, C, L] (as BatchNorm1d), 4 for [N, C, H, W] (as
  // BatchNorm2d).
  SyncBatchNorm(int64_t num_features, int64_t input_dim, std::shared_ptr<dist::ProcessGroup> group,
                double eps = 1e-5, double momentum = 0.1);
  SyncBatchNorm(int64_t num_features, int64_t input_dim, std::shared_ptr<dist::ProcessGroup> group,
                const BatchNormOptions& options);
};

// Makes every BatchNorm in `module`'s tree normalise over `group` (see the contract);
// returns the number converted. Modules already converted are switched to `group`.
int convert_sync_batchnorm(Module& module, std::shared_ptr<dist::ProcessGroup> group);

}  // namespace nn
}  // namespace tandem
