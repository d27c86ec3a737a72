// SyncBatchNorm against the single-process oracle: N ranks, each with SyncBatchNorm on a
// slice of a global batch, must compute what one process computes with BatchNorm on the
// whole batch: the output, the input and parameter gradients (parameter gradients summed
// over the ranks, the loss being the sum of the ranks' losses), the running statistics,
// in training and then eval mode; also with one rank's slice empty.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "reducer/sync_batch_norm.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_world.h"
#include "tests/reducer/sync_bn_oracle.h"

using namespace tandem;
using namespace tandem::testing;
using namespace tandem::testing::sync_bn;

namespace {

void check_against_oracle(int64_t input_dim, const std::vector<int64_t>& starts,
                          const std::vector<int64_t>& counts, int64_t global_n) {
  sync_bn::check_against_oracle(input_dim, starts, counts, global_n, world(), *world(), Device::cpu());
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
  check_against_oracle(3, starts, counts, global_n);
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
  check_against_oracle(3, starts, counts, global_n);
  check_against_oracle(4, starts, counts, global_n);
}

TEST_CASE("SyncBatchNorm refuses a global batch of one value per channel", "[sync_batch_norm]") {
  nn::SyncBatchNorm bn(2, 2, world());
  const int64_t n = world()->rank() == 0 ? 1 : 0;
  Variable x(Tensor::ones({n, 2}));
  REQUIRE_THROWS_WITH(bn.forward(x), Catch::Contains("SyncBatchNorm") && Catch::Contains("needs at least 2"));
}
