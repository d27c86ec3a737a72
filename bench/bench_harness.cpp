#include "bench/bench_harness.h"

#include <cstdio>
#include <exception>

#include "runtime/error.h"

#if TANDEM_HAVE_CUDA
#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"
#endif

namespace tandem::bench {
namespace {

// Empty when a GPU can be used (its allocator then installed); else why not.
std::string gpu_missing() {
#if TANDEM_HAVE_CUDA
  std::string why;
  if (!cuda::device_available(&why)) return why;
  install_cuda_memory();
  return {};
#else
  return "this build has no CUDA";
#endif
}

int run_callbacks(const Bench& bench, const World& world) {
  if (world.root() && bench.header) {
    bench.header(world);
    std::fflush(stdout);
  }
  const int64_t wrong = bench.rows(world);
  if (world.root()) {
    std::printf("# %s : %lld %s\n", bench.wrong_label.c_str(), static_cast<long long>(wrong),
                wrong ? "WRONG" : "OK");
    if (bench.footer) bench.footer(world, wrong);
    std::fflush(stdout);
  }
  if (wrong == 0) return 0;
  if (world.root())
    std::fprintf(stderr, "%s: %lld wrong values\n", bench.name.c_str(), static_cast<long long>(wrong));
  return 1;
}

}  // namespace

int run_bench(const Bench& bench) {
  if (bench.needs_gpu) {
    const std::string why = gpu_missing();
    if (!why.empty()) {
      std::printf("%s: needs a GPU (%s); nothing measured\n", bench.name.c_str(), why.c_str());
      return 0;
    }
  }
  if (!bench.backend) {
    try {
      return run_callbacks(bench, World{});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", bench.name.c_str(), e.what());
      return 1;
    }
  }
  try {
    dist::DistributedContext context(*bench.backend);
    World world{context.world(), 0, 1};
    world.rank = world.group->rank();
    world.size = world.group->size();
    return run_callbacks(bench, world);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", bench.name.c_str(), e.what());
    dist::abort_on_timeout(e);  // ends every rank, not only this one
  }
}

void print_columns(const std::vector<Column>& columns) {
  bool units = false;
  std::printf("#");
  for (const Column& c : columns) {
    std::printf(" %*s", c.width, c.name);
    units = units || *c.unit != '\0';
  }
  std::printf("\n");
  if (!units) return;
  std::printf("#");
  for (const Column& c : columns) std::printf(" %*s", c.width, c.unit);
  std::printf("\n");
}

}  // namespace tandem::bench
