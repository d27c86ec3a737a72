// Soak test of the Reducer's phase cache: a LayerDrop model (ten optional 1 MB layers, a
// random subset each iteration, so nearly every backward is a new phase) trained for 200
// iterations keeps its buckets within four times its parameters' bytes, hands evicted buckets
// back to malloc rather than to the tensor cache, and keeps its resident size flat after
// warm-up.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "autograd/optim.h"
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

TEST_CASE("a LayerDrop model keeps its buckets and resident size bounded", "[reducer][phase_cache][soak]") {
  // Ten 512x512 layers: 1 MiB of weights each. The activations are below the tensor
  // cache's smallest block, so apart from buckets it holds at most one step's gradients.
  constexpr int64_t kWidth = 512;
  constexpr int kIterations = 200, kWarmUp = 100, kWindow = 9;
  auto model = std::make_shared<LayerDropModel>(kWidth, /*seed=*/3);
  DistributedDataParallel ddp(model, world());
  optim::SGD sgd(model->parameters(), {.lr = 1e-3});
  size_t parameter_bytes = 0;
  for (const Variable& p : model->parameters()) parameter_bytes += p.data().bytes();

  size_t most_held = 0, most_cached = 0;
  std::vector<double> rss;
  for (int it = 0; it < kIterations; ++it) {
    sgd.zero_grad();
    Tensor x = slice_rows(random_tensor({kGlobalBatch, kWidth}, 900 + it), world()->rank(), world()->size());
    model->loss(Variable(x), layer_drop_subset(it)).backward();
    sgd.step();
    most_held = std::max(most_held, ddp.reducer().cached_bucket_bytes());
    most_cached = std::max(most_cached, cpu_memory_stats().bytes_cached);
    rss.push_back(resident_mb());
  }
  // Medians of a few iterations: one sample may jump as an allocator keeps or hands back a
  // block, while a leak raises them all.
  const double warm = median({rss.begin() + kWarmUp - kWindow, rss.begin() + kWarmUp});
  const double end = median({rss.end() - kWindow, rss.end()});
  const double parameter_mb = static_cast<double>(parameter_bytes) / 1e6;
  std::printf(
      "rank %d: buckets held at most %.2f MB (parameters %.2f MB), %lld phases evicted, tensor cache "
      "at most %.2f MB; rss %.1f MB after warm-up (iteration %d), %.1f MB at the end (%d)\n",
      world()->rank(), static_cast<double>(most_held) / 1e6, parameter_mb,
      static_cast<long long>(ddp.reducer().evicted_phases()), static_cast<double>(most_cached) / 1e6, warm,
      kWarmUp, end, kIterations);
  CHECK(most_held <= 4 * parameter_bytes);
  CHECK(ddp.reducer().evicted_phases() > 0);
  // Evicted buckets went to malloc, which reuses them for any size; kept by the tensor
  // cache for their own sizes only, they would pile up (30-70 MB here).
  CHECK(most_cached <= parameter_bytes);
  // After warm-up malloc may still meet new arrangements of the variable-size buckets and
  // grow its heap by a few MB (0-10 MB in 60 runs), never by more than the cap's worth;
  // without the cap every iteration adds its phase (about 5 MB) for good.
  CHECK(end - warm <= 4 * parameter_mb);
}
