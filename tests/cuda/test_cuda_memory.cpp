// The CUDA runtime layer: the caching allocator (steady state without cudaMalloc, stats,
// poison), device fill and dtype conversion against their CPU twins, copies between
// host and device, and Module::to.
#include "autograd/nn.h"
#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

const DType kAllTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("caching allocator: a repeated step reuses blocks and calls cudaMalloc no more") {
  auto step = [] {
    std::vector<Tensor> live;
    for (int64_t n : {1, 100, 4096, 300000, 3 << 20})
      live.push_back(Tensor::empty({n}, DType::f32, Device::cuda()));
    live.pop_back();  // freed mid-step, as temporaries are
    live.push_back(Tensor::empty({777}, DType::f64, Device::cuda()));
  };
  step();
  CudaMemoryStats before = cuda_memory_stats();
  for (int i = 0; i < 10; ++i) step();
  CudaMemoryStats after = cuda_memory_stats();
  CHECK(after.device_mallocs == before.device_mallocs);
  CHECK(after.allocations - before.allocations == 60);
  CHECK(after.cache_hits - before.cache_hits == 60);
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.peak_bytes_in_use >= static_cast<size_t>(3 << 20) * 4);
  CHECK(after.bytes_reserved >= after.peak_bytes_in_use);
}

TEST_CASE("caching allocator: empty_cuda_cache returns cached blocks to the driver") {
  { Tensor big = Tensor::empty({8 << 20}, DType::f32, Device::cuda()); }
  CudaMemoryStats held = cuda_memory_stats();
  REQUIRE(held.bytes_reserved > held.bytes_in_use);
  empty_cuda_cache();
  CudaMemoryStats after = cuda_memory_stats();
  CHECK(after.bytes_reserved == after.bytes_in_use);
  CHECK(after.device_frees > held.device_frees);
}

TEST_CASE("caching allocator: an impossible request names its size and the device") {
  try {
    Tensor huge = Tensor::empty({int64_t{1} << 40}, DType::f32, Device::cuda());
    FAIL("a 4 TiB allocation succeeded");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("out of memory on cuda:0") != std::string::npos);
    CHECK(m.find("MiB") != std::string::npos);
  }
  Tensor fine = Tensor::zeros({16}, DType::f32, Device::cuda());  // the allocator still works
  CHECK(fine.to_vector() == std::vector<double>(16, 0.0));
}

TEST_CASE("poisoned allocations read as NaN until written") {
  Tensor t = Tensor::empty({33}, DType::f32, Device::cuda());
  for (double v : t.to_vector()) CHECK(std::isnan(v));
}

TEST_CASE("device fill matches the CPU fill in every dtype") {
  for (DType dtype : kAllTypes) {
    for (double value : {0.0, 1.0, -2.5, 0.1, 65504.0, 1e-8}) {
      Tensor cpu = Tensor::full({1001}, value, dtype);
      Tensor gpu = Tensor::full({1001}, value, dtype, Device::cuda());
      INFO(dtype_name(dtype) << " value " << value);
      CHECK(gpu.to_vector() == cpu.to_vector());
    }
  }
}

TEST_CASE("device dtype conversion matches the CPU conversion bit for bit") {
  for (DType from : kAllTypes) {
    for (DType to : kAllTypes) {
      // Values across the ranges where rounding matters, incl. f16 overflow and subnormals.
      Tensor src = random_cpu({4099}, DType::f64, 11 + static_cast<int>(from) * 4 + static_cast<int>(to),
                              -70000, 70000)
                       .to(from);
      Tensor small = random_cpu({257}, DType::f64, 99, -1e-5, 1e-5).to(from);
      for (const Tensor& s : {src, small}) {
        Tensor want = s.to(to);
        Tensor got = s.to(Device::cuda()).to(to);
        INFO(dtype_name(from) << " -> " << dtype_name(to));
        std::vector<double> w = want.to_vector(), g = got.to_vector();
        REQUIRE(w.size() == g.size());
        size_t mismatches = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          bool same = (std::isnan(w[i]) && std::isnan(g[i])) || w[i] == g[i];
          mismatches += same ? 0 : 1;
        }
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("copies: host to device to device to host keep every byte, views included") {
  Tensor host = random_cpu({3, 1000}, DType::f32, 5);
  Tensor gpu = host.to(Device::cuda());
  Tensor gpu2 = Tensor::empty({3, 1000}, DType::f32, Device::cuda());
  gpu2.copy_(gpu);
  CHECK(gpu2.to_vector() == host.to_vector());
  Tensor row = gpu2.narrow_rows(1, 1);  // a view at an element offset
  CHECK(row.to_vector() == host.narrow_rows(1, 1).to_vector());
  Tensor back = Tensor::zeros({1, 1000});
  back.copy_(row);
  CHECK(back.to_vector() == host.narrow_rows(1, 1).to_vector());
}

TEST_CASE("pinned buffers and events: an async upload through pinned memory arrives") {
  cuda::PinnedBuffer pinned(4096 * sizeof(float));
  float* p = static_cast<float*>(pinned.data());
  for (int i = 0; i < 4096; ++i) p[i] = static_cast<float>(i) * 0.5f;
  Tensor gpu = Tensor::empty({4096}, DType::f32, Device::cuda());
  cuda::CudaEvent start(true), stop(true);
  start.record();
  REQUIRE(cudaMemcpyAsync(gpu.raw_data(), p, 4096 * sizeof(float), cudaMemcpyHostToDevice,
                          cuda::compute_stream()) == cudaSuccess);
  stop.record();
  stop.synchronize();
  CHECK(stop.done());
  CHECK(stop.milliseconds_since(start) >= 0.0f);
  std::vector<double> got = gpu.to_vector();
  for (int i = 0; i < 4096; ++i) REQUIRE(got[static_cast<size_t>(i)] == i * 0.5);
}

TEST_CASE("Module::to moves parameters and buffers in place") {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 4));
  net->push_back(std::make_shared<nn::BatchNorm1d>(4));
  std::vector<Tensor> before;
  for (const Tensor& t : net->buffers()) before.push_back(t.clone());
  std::vector<Tensor> params_before;
  for (const Variable& v : net->parameters()) params_before.push_back(v.data().clone());
  std::vector<Variable> handles = net->parameters();
  net->to(Device::cuda());
  for (size_t i = 0; i < handles.size(); ++i) {
    CHECK(handles[i].device() == Device::cuda());  // handles taken before see the move
    CHECK(handles[i].data().to_vector() == params_before[i].to_vector());
  }
  std::vector<Tensor> after = net->buffers();
  for (size_t i = 0; i < after.size(); ++i) {
    CHECK(after[i].device() == Device::cuda());
    CHECK(after[i].to_vector() == before[i].to_vector());
  }
}
