// The caching host allocator: blocks come back from the cache, within its capacity.
#include <catch2/catch.hpp>

#include "runtime/cpu_memory.h"
#include "runtime/tensor.h"

using namespace tandem;

namespace {

// Restores the capacity a test changed, and leaves the cache empty.
struct CapacityGuard {
  size_t saved = cpu_memory_stats().capacity;
  ~CapacityGuard() {
    set_cpu_cache_capacity(saved);
    empty_cpu_cache();
  }
};

}  // namespace

TEST_CASE("a freed large block is handed back for the same size, and tensors stay correct", "[cpu_memory]") {
  CapacityGuard guard;
  set_cpu_cache_capacity(size_t{64} << 20);
  empty_cpu_cache();
  const void* first = nullptr;
  {
    Tensor t = Tensor::full({256, 256}, 3.0f);  // 256 kB
    first = t.raw_data();
  }
  CpuMemoryStats before = cpu_memory_stats();
  CHECK(before.bytes_cached >= 256 * 256 * 4);
  Tensor again = Tensor::zeros({256, 256});
  CHECK(again.raw_data() == first);
  CpuMemoryStats after = cpu_memory_stats();
  CHECK(after.cache_hits == before.cache_hits + 1);
  CHECK(after.bytes_cached == before.bytes_cached - 256 * 256 * 4);
  // A reused block carries its old contents; zeros() must still give zeros.
  const float* p = again.data<float>();
  int64_t nonzero = 0;
  for (int64_t i = 0; i < again.numel(); ++i) nonzero += p[i] != 0.0f;
  CHECK(nonzero == 0);
}

TEST_CASE("repeated steps of the same sizes stop allocating from the system", "[cpu_memory]") {
  CapacityGuard guard;
  set_cpu_cache_capacity(size_t{64} << 20);
  empty_cpu_cache();
  auto step = [] {
    Tensor a = Tensor::full({128, 512}, 1.0f);
    Tensor b = Tensor::full({512, 300}, 2.0f);
    Tensor c = a.clone();
    return c.numel() + b.numel();
  };
  step();
  CpuMemoryStats before = cpu_memory_stats();
  for (int i = 0; i < 10; ++i) step();
  CpuMemoryStats after = cpu_memory_stats();
  CHECK(after.allocations - before.allocations == 30);
  CHECK(after.cache_hits - before.cache_hits == 30);
}

TEST_CASE("small blocks are not cached, and the cache never exceeds its capacity", "[cpu_memory]") {
  CapacityGuard guard;
  set_cpu_cache_capacity(size_t{1} << 20);  // 1 MiB
  empty_cpu_cache();
  { Tensor small = Tensor::zeros({16}); }
  CHECK(cpu_memory_stats().bytes_cached == 0);
  {
    Tensor a = Tensor::zeros({100, 1024});  // 400 kB each
    Tensor b = Tensor::zeros({100, 1024});
    Tensor c = Tensor::zeros({100, 1024});
  }
  CpuMemoryStats s = cpu_memory_stats();
  CHECK(s.bytes_cached > 0);
  CHECK(s.bytes_cached <= s.capacity);
  { Tensor huge = Tensor::zeros({1024, 1024}); }  // 4 MiB: larger than the whole cache
  CHECK(cpu_memory_stats().bytes_cached <= s.capacity);
  set_cpu_cache_capacity(0);
  CHECK(cpu_memory_stats().bytes_cached == 0);
  { Tensor d = Tensor::zeros({100, 1024}); }
  CHECK(cpu_memory_stats().bytes_cached == 0);
}

TEST_CASE("empty_cpu_cache returns everything and in-use bytes are tracked", "[cpu_memory]") {
  CapacityGuard guard;
  set_cpu_cache_capacity(size_t{64} << 20);
  const size_t in_use_before = cpu_memory_stats().bytes_in_use;
  {
    Tensor a = Tensor::zeros({256, 1024});  // 1 MiB
    CHECK(cpu_memory_stats().bytes_in_use == in_use_before + (size_t{1} << 20));
  }
  CHECK(cpu_memory_stats().bytes_in_use == in_use_before);
  CHECK(cpu_memory_stats().bytes_cached >= (size_t{1} << 20));
  empty_cpu_cache();
  CHECK(cpu_memory_stats().bytes_cached == 0);
}

TEST_CASE("blocks freed while a CpuCacheBypass lives on the thread go back to malloc", "[cpu_memory]") {
  CapacityGuard guard;
  set_cpu_cache_capacity(size_t{64} << 20);
  empty_cpu_cache();
  constexpr size_t kBlock = 256 * 256 * 4;  // 256 kB
  Tensor a = Tensor::zeros({256, 256}), b = Tensor::zeros({256, 256}), c = Tensor::zeros({256, 256});
  {
    CpuCacheBypass bypass;
    a = Tensor();
    { CpuCacheBypass nested; }  // a nested one ending leaves the outer one in force
    b = Tensor();
    CHECK(cpu_memory_stats().bytes_cached == 0);
  }
  c = Tensor();  // the bypass is over: cached again
  CHECK(cpu_memory_stats().bytes_cached == kBlock);
}
