// SyncBatchNorm against the single-process oracle: N ranks, each with SyncBatchNorm on a
// slice of a global batch, must compute what one process computes with BatchNorm on the
// whole batch: the output, the input and parameter gradients (parameter gradients summed
// over the ranks, the loss being the sum of the ranks' losses), the running statistics,
// in training and then eval mode; also with one rank's slice empty.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "reducer/sync_batch_norm.h"
#include "runtime/dist/process_group.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> group = dist::init_process_group();
  return group;
}

Tensor summed_over_ranks(const Tensor& t) {
  Tensor s = t.clone();
  world()->allreduce(s, dist::ReduceOp::sum, "test sum")->wait();
  return s;
}

std::shared_ptr<nn::BatchNorm> make_bn(int64_t input_dim, int64_t c) {
  if (input_dim == 2) return std::make_shared<nn::BatchNorm1d>(c, 1e-5, 0.1);
  return std::make_shared<nn::BatchNorm2d>(c, 1e-5, 0.1);
}

// Non-default gamma and beta, the same on every rank.
void set_affine(nn::BatchNorm& bn, uint64_t seed) {
  bn.weight.data().copy_(random_tensor({bn.num_features}, seed));
  bn.bias.data().copy_(random_tensor({bn.num_features}, seed + 1));
}

struct StepResult {
  Tensor y, dx, dgamma, dbeta;
};

// One forward and backward of loss = sum(w * bn(x)).
StepResult step(nn::BatchNorm& bn, const Tensor& x_data, const Tensor& w) {
  bn.zero_grad();
  Variable x(x_data.clone(), true);
  Variable y = bn.forward(x);
  sum(mul(y, Variable(w))).backward();
  return {y.data().clone(), x.grad().clone(), bn.weight.grad().clone(), bn.bias.grad().clone()};
}

// Rows [first, first + count) of every tensor.
Tensor rows(const Tensor& t, int64_t first, int64_t count) { return t.narrow_rows(first, count).clone(); }

// Runs two training steps and one eval step with rank r holding rows
// [starts[r], starts[r] + counts[r]) of the global batch, against the oracle.
void check_against_oracle(int64_t input_dim, const std::vector<int64_t>& starts,
                          const std::vector<int64_t>& counts, int64_t global_n) {
  const int64_t c = 3;
  const Shape shape = input_dim == 2 ? Shape{global_n, c} : Shape{global_n, c, 4, 5};
  auto oracle = make_bn(input_dim, c);
  auto synced = make_bn(input_dim, c);
  set_affine(*oracle, 40);
  set_affine(*synced, 40);
  REQUIRE(nn::convert_sync_batchnorm(*synced, world()) == 1);
  REQUIRE(synced->type_name().rfind("SyncBatchNorm", 0) == 0);
  const int r = world()->rank();
  for (int it = 0; it < 3; ++it) {
    const bool training = it < 2;
    INFO((input_dim == 2 ? "BatchNorm1d" : "BatchNorm2d")
         << ", " << (training ? "training" : "eval") << " step " << it << ", rank " << r << " of "
         << world()->size() << ", " << counts[r] << " rows");
    oracle->train(training);
    synced->train(training);
    // Offset and scaled inputs, so the variance is not near 1 and the mean not near 0.
    Tensor x = kernels::add_scalar(kernels::scale(random_tensor(shape, 100 + it), 3.0), 2.0 + it);
    Tensor w = random_tensor(shape, 200 + it);
    StepResult want = step(*oracle, x, w);
    StepResult got = step(*synced, rows(x, starts[r], counts[r]), rows(w, starts[r], counts[r]));
    require_close({got.y, got.dx}, {rows(want.y, starts[r], counts[r]), rows(want.dx, starts[r], counts[r])},
                  1e-5);
    require_close({summed_over_ranks(got.dgamma), summed_over_ranks(got.dbeta)}, {want.dgamma, want.dbeta},
                  1e-5);
    require_close({synced->running_mean, synced->running_var}, {oracle->running_mean, oracle->running_var},
                  1e-5);
  }
}

}  // namespace

TEST_CASE("SyncBatchNorm on slices equals BatchNorm on the global batch", "[sync_batch_norm][oracle]") {
  const int size = world()->size();
  const int64_t global_n = 12;  // divisible by 1..4 ranks
  std::vector<int64_t> starts, counts;
  for (int r = 0; r < size; ++r) {
    starts.push_back(r * global_n / size);
    counts.push_back(global_n / size);
  }
  check_against_oracle(2, starts, counts, global_n);
  check_against_oracle(4, starts, counts, global_n);
}

TEST_CASE("SyncBatchNorm with an empty batch on rank 0 still takes part", "[sync_batch_norm][oracle]") {
  const int size = world()->size();
  if (size < 2) return;         // one rank: its batch is the whole batch
  const int64_t global_n = 12;  // divisible by the 1..3 non-empty ranks
  std::vector<int64_t> starts{0}, counts{0};
  for (int r = 1; r < size; ++r) {
    starts.push_back((r - 1) * global_n / (size - 1));
    counts.push_back(global_n / (size - 1));
  }
  check_against_oracle(2, starts, counts, global_n);
  check_against_oracle(4, starts, counts, global_n);
}

TEST_CASE("SyncBatchNorm refuses a global batch of one value per channel", "[sync_batch_norm]") {
  nn::SyncBatchNorm bn(2, 2, world());
  const int64_t n = world()->rank() == 0 ? 1 : 0;
  Variable x(Tensor::ones({n, 2}));
  REQUIRE_THROWS_WITH(bn.forward(x), Catch::Contains("SyncBatchNorm") && Catch::Contains("needs at least 2"));
}
