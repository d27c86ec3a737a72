// Soak test of the Reducer's flat bucket storage: a LayerDrop model (ten optional 1 MB
// layers, a random subset each iteration, so nearly every backward is a new phase) trained
// for 200 iterations keeps every phase in one storage of its parameters' bytes (plus
// alignment), gets the single-process oracle's gradients, and keeps its resident size flat
// after warm-up.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "autograd/optim.h"
#include "kernels/elementwise.h"
#include "reducer/ddp.h"
#include "runtime/cpu_memory.h"
#include "runtime/dist/process_group.h"
#include "tests/mpi_world.h"
#include "tests/reducer/gan_fixture.h"
#include "tests/reducer/layer_drop_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  int64_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return static_cast<double>(resident_pages) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TEST_CASE("a LayerDrop model's phases share one flat storage of its parameters' bytes",
          "[reducer][phases][soak]") {
  // Ten 512x512 layers: 1 MiB of weights each. The activations are below the tensor
  // cache's smallest block, so apart from buckets it holds at most one step's gradients.
  constexpr int64_t kWidth = 512;
  constexpr int kIterations = 200, kWarmUp = 100, kWindow = 9;
  constexpr int kChecked = 40;  // iterations whose gradients are checked against the oracle
  auto model = std::make_shared<LayerDropModel>(kWidth, /*seed=*/3);
  DistributedDataParallel ddp(model, world());
  optim::SGD sgd(model->parameters(), {.lr = 1e-3});
  // The oracle: the same model without a Reducer, stepped with the average over the ranks'
  // slices of their gradients, computed here.
  auto oracle = std::make_shared<LayerDropModel>(kWidth, /*seed=*/3);
  optim::SGD oracle_sgd(oracle->parameters(), {.lr = 1e-3});
  const size_t parameter_bytes = ddp.reducer().parameter_bytes();
  const size_t storage_bytes = ddp.reducer().bucket_bytes();

  size_t most_held = 0, most_cached = 0;
  int64_t oracle_mismatches = 0;
  std::vector<double> rss;
  for (int it = 0; it < kIterations; ++it) {
    const int n = world()->size();
    const Tensor global = random_tensor({kGlobalBatch, kWidth}, 900 + it);
    if (it < kChecked) {
      std::vector<Variable> params = oracle->parameters();
      std::vector<Tensor> sum(params.size());
      for (int r = 0; r < n; ++r) {
        oracle->zero_grad();
        oracle->loss(Variable(slice_rows(global, r, n)), layer_drop_subset(it)).backward();
        for (size_t i = 0; i < params.size(); ++i) {
          if (!params[i].grad().defined()) continue;
          sum[i] = sum[i].defined() ? kernels::add(sum[i], params[i].grad()) : params[i].grad().clone();
        }
      }
      for (size_t i = 0; i < params.size(); ++i) {
        params[i].set_grad(sum[i].defined() ? kernels::scale(sum[i], 1.0 / n) : Tensor());
      }
    }
    sgd.zero_grad();
    model->loss(Variable(slice_rows(global, world()->rank(), n)), layer_drop_subset(it)).backward();
    if (it < kChecked) {
      std::vector<Variable> mine = model->parameters(), want = oracle->parameters();
      for (size_t i = 0; i < mine.size(); ++i) {
        if (mine[i].grad().defined() != want[i].grad().defined()) {
          ++oracle_mismatches;
        } else if (want[i].grad().defined()) {
          const std::vector<double> g = mine[i].grad().to_vector(), w = want[i].grad().to_vector();
          for (size_t k = 0; k < g.size(); ++k) {
            if (std::abs(g[k] - w[k]) > 1e-6 + 1e-6 * std::abs(w[k])) {
              ++oracle_mismatches;
              break;
            }
          }
        }
      }
      oracle_sgd.step();
    }
    sgd.step();
    most_held = std::max(most_held, ddp.reducer().bucket_bytes());
    most_cached = std::max(most_cached, cpu_memory_stats().bytes_cached);
    rss.push_back(resident_mb());
  }
  // Medians of a few iterations: one sample may jump as an allocator keeps or hands back a
  // block, while a leak raises them all.
  const double warm = median({rss.begin() + kWarmUp - kWindow, rss.begin() + kWarmUp});
  const double end = median({rss.end() - kWindow, rss.end()});
  const double parameter_mb = static_cast<double>(parameter_bytes) / 1e6;
  const size_t phases = ddp.reducer().stats().size();
  std::printf(
      "rank %d: %zu phases, buckets held at most %.3f MB for %.3f MB of parameters (%.4fx), tensor cache "
      "at most %.2f MB; rss %.1f MB after warm-up (iteration %d), %.1f MB at the end (%d)\n",
      world()->rank(), phases, static_cast<double>(most_held) / 1e6, parameter_mb,
      static_cast<double>(most_held) / static_cast<double>(parameter_bytes),
      static_cast<double>(most_cached) / 1e6, warm, kWarmUp, end, kIterations);
  CHECK(oracle_mismatches == 0);
  // Every phase kept (none evicted and built again), all in the storage made at construction.
  CHECK(phases > 100);
  CHECK(most_held == storage_bytes);
  CHECK(buckets_within_parameters(ddp.reducer()));
  // After warm-up malloc may still meet new arrangements of the gradients and grow its heap
  // by a little; phases themselves cost no memory.
  CHECK(end - warm <= parameter_mb);
}
