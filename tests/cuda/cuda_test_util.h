// Helpers of the GPU suite: random inputs on the host, and the comparison of a CUDA
// result with its CPU twin by relative norm error (NaN never passes).
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>

#include "runtime/rng.h"
#include "runtime/tensor.h"

namespace tandem::testing {

// Uniform in [lo, hi), on the CPU; fresh draws for every seed.
inline Tensor random_cpu(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Generator gen(seed);
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_uniform(t, lo, hi, gen);
  return t.to(dtype);
}

inline Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

// ||got - want|| / max(||want||, tiny), computed in double on the host.
inline double relative_error(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  REQUIRE(g.size() == w.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i]) && std::isfinite(w[i])) return INFINITY;  // unwritten (poisoned) or overflow
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-300);
}

// Per-dtype bound: float32 reductions and GEMM reorder sums; float64 is near exact.
inline double tolerance(DType dtype) { return dtype == DType::f64 ? 1e-12 : 1e-5; }

inline void require_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  INFO(what << ": GPU " << gpu.str() << " vs CPU " << cpu.str());
  REQUIRE(gpu.device().is_cuda());
  REQUIRE(gpu.shape() == cpu.shape());
  REQUIRE(gpu.dtype() == cpu.dtype());
  double err = relative_error(gpu, cpu);
  INFO("relative error " << err << " (limit " << tolerance(cpu.dtype()) << ")");
  REQUIRE(err <= tolerance(cpu.dtype()));
}

// The message of the Error a call throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

// A CPU and a GPU operand together: an Error naming the op and both devices.
inline void require_device_mismatch(const std::string& op, const std::function<void()>& call) {
  std::string message = error_of(call);
  INFO(op << " threw: " << message);
  REQUIRE(message.find(op + ":") != std::string::npos);
  REQUIRE(message.find("device mismatch") != std::string::npos);
  REQUIRE(message.find("on cpu") != std::string::npos);
  REQUIRE(message.find("on cuda:0") != std::string::npos);
}

}  // namespace tandem::testing
