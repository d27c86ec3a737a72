// The SyncBatchNorm oracle, shared by the CPU (MPI) and GPU (NCCL) suites: N ranks, each
// with SyncBatchNorm on a slice of a global batch, must compute what one process computes
// with BatchNorm on the whole batch (on the CPU): the output, the input and parameter
// gradients (parameter gradients summed over the ranks, the loss being the sum of the ranks'
// losses), the running statistics, in two training steps and then one eval step.
// check_against_oracle runs the synchronised copy on `device` over `sync_group`; the
// results are compared on the CPU, summed over `cpu_group` (MPI). Collective: every rank
// calls it with the same arguments except its own slice.
#pragma once

#include <memory>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/process_group.h"
#include "tests/reducer/gan_fixture.h"

namespace tandem::testing::sync_bn {

inline Tensor summed_over_ranks(const Tensor& t, dist::ProcessGroup& cpu_group) {
  Tensor s = t.clone();
  cpu_group.allreduce(s, dist::ReduceOp::sum, "test sum")->wait();
  return s;
}

// input_dim 2 ([N, C]) and 3 ([N, C, L]) make a BatchNorm1d, 4 a BatchNorm2d.
inline std::shared_ptr<nn::BatchNorm> make_bn(int64_t input_dim, int64_t c) {
  if (input_dim != 4) return std::make_shared<nn::BatchNorm1d>(c, 1e-5, 0.1);
  return std::make_shared<nn::BatchNorm2d>(c, 1e-5, 0.1);
}

// Non-default gamma and beta, the same on every rank.
inline void set_affine(nn::BatchNorm& bn, uint64_t seed) {
  bn.weight.data().copy_(random_tensor({bn.num_features}, seed));
  bn.bias.data().copy_(random_tensor({bn.num_features}, seed + 1));
}

struct StepResult {
  Tensor y, dx, dgamma, dbeta;
};

// One forward and backward of loss = sum(w * bn(x)).
inline StepResult step(nn::BatchNorm& bn, const Tensor& x_data, const Tensor& w) {
  bn.zero_grad();
  Variable x(x_data.clone(), true);
  Variable y = bn.forward(x);
  sum(mul(y, Variable(w))).backward();
  return {y.data().clone(), x.grad().clone(), bn.weight.grad().clone(), bn.bias.grad().clone()};
}

inline StepResult on_cpu(const StepResult& s) {
  return {s.y.to(Device::cpu()), s.dx.to(Device::cpu()), s.dgamma.to(Device::cpu()),
          s.dbeta.to(Device::cpu())};
}

// Rows [first, first + count) of every tensor.
inline Tensor rows(const Tensor& t, int64_t first, int64_t count) {
  return t.narrow_rows(first, count).clone();
}

// Runs two training steps and one eval step with rank r holding rows
// [starts[r], starts[r] + counts[r]) of the global batch, against the oracle.
inline void check_against_oracle(int64_t input_dim, const std::vector<int64_t>& starts,
                                 const std::vector<int64_t>& counts, int64_t global_n,
                                 const std::shared_ptr<dist::ProcessGroup>& sync_group,
                                 dist::ProcessGroup& cpu_group, Device device) {
  const int64_t c = 3;
  const Shape shape = input_dim == 2   ? Shape{global_n, c}
                      : input_dim == 3 ? Shape{global_n, c, 6}
                                       : Shape{global_n, c, 4, 5};
  auto oracle = make_bn(input_dim, c);
  auto synced = make_bn(input_dim, c);
  set_affine(*oracle, 40);
  set_affine(*synced, 40);
  REQUIRE(nn::convert_sync_batchnorm(*synced, sync_group) == 1);
  synced->to(device);
  REQUIRE(synced->type_name().rfind("SyncBatchNorm", 0) == 0);
  const int r = cpu_group.rank();
  for (int it = 0; it < 3; ++it) {
    const bool training = it < 2;
    INFO((input_dim == 4 ? "BatchNorm2d " : "BatchNorm1d ")
         << shape_str(shape) << ", " << (training ? "training" : "eval") << " step " << it << ", rank " << r
         << " of " << cpu_group.size() << ", " << counts[r] << " rows");
    oracle->train(training);
    synced->train(training);
    // Offset and scaled inputs, so the variance is not near 1 and the mean not near 0.
    Tensor x = kernels::add_scalar(kernels::scale(random_tensor(shape, 100 + it), 3.0), 2.0 + it);
    Tensor w = random_tensor(shape, 200 + it);
    StepResult want = step(*oracle, x, w);
    StepResult got = on_cpu(
        step(*synced, rows(x, starts[r], counts[r]).to(device), rows(w, starts[r], counts[r]).to(device)));
    require_close({got.y, got.dx}, {rows(want.y, starts[r], counts[r]), rows(want.dx, starts[r], counts[r])},
                  1e-5);
    require_close({summed_over_ranks(got.dgamma, cpu_group), summed_over_ranks(got.dbeta, cpu_group)},
                  {want.dgamma, want.dbeta}, 1e-5);
    require_close({synced->running_mean.to(Device::cpu()), synced->running_var.to(Device::cpu())},
                  {oracle->running_mean, oracle->running_var}, 1e-5);
  }
}

// Equal slices of `global_n` rows over `size` ranks; with `empty_first`, rank 0's slice is
// empty and the others share the rows.
inline void slices(int size, int64_t global_n, bool empty_first, std::vector<int64_t>& starts,
                   std::vector<int64_t>& counts) {
  starts.clear();
  counts.clear();
  const int holders = empty_first ? size - 1 : size;
  for (int r = 0; r < size; ++r) {
    const int k = empty_first ? r - 1 : r;
    starts.push_back(k < 0 ? 0 : k * global_n / holders);
    counts.push_back(k < 0 ? 0 : global_n / holders);
  }
}

}  // namespace tandem::testing::sync_bn
