#include "kernels/cpu/gemm_onednn.h"

#include "kernels/cpu/conv_onednn.h"
#include "runtime/error.h"

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include "runtime/trace.h"
#endif

namespace tandem::kernels::cpu {

#if TANDEM_HAVE_ONEDNN

namespace {

using dnnl::memory;

// Never destroyed: a static destructor could run while another thread still multiplies.
const dnnl::engine& engine() {
  static auto* e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

struct Plan {
  memory::desc a, b, c, scratchpad;
  dnnl::matmul primitive;
};

using Key = std::array<int64_t, 7>;  // m, n, k, ta, tb, threads, bfloat16 operands

// The plans of the process, made on first use of their key; references stay valid forever.
const Plan& plan_for(const Key& key) {
  static std::mutex mutex;
  static auto* plans = new std::map<Key, std::unique_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans->find(key);
  if (it == plans->end()) {
    const auto [m, n, k, ta, tb, threads, bf16] = key;
    const auto operand = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
    auto plan = std::make_unique<Plan>();
    // Row-major buffers; a transposed operand as the other order of strides. C is float32.
    plan->a = memory::desc({m, k}, operand, ta ? memory::dims{1, m} : memory::dims{k, 1});
    plan->b = memory::desc({k, n}, operand, tb ? memory::dims{1, k} : memory::dims{n, 1});
    plan->c = memory::desc({m, n}, memory::data_type::f32, memory::dims{n, 1});
    // A scratchpad per call: the library's own is shared between threads (ranks run as
    // threads in the tests, and a program may multiply on several).
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(plan->a, plan->b, plan->c), attr, engine());
    plan->scratchpad = pd.scratchpad_desc();
    plan->primitive = dnnl::matmul(pd);
    it = plans->emplace(key, std::move(plan)).first;
  }
  return *it->second;
}

}  // namespace

bool onednn_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, double alpha, double beta) {
  if (!onednn_takes(a.dtype()) || alpha != 1.0 || beta != 0.0) return false;
  const bool bf16 = a.dtype() == DType::bf16;
  const int64_t m = c.size(0), n = c.size(1), k = ta ? a.size(0) : a.size(1);
  if (m < 2 || n < 2 || k < 1) return false;
  const int threads = cpu_conv_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  try {
    const Plan& plan = plan_for({m, n, k, ta ? 1 : 0, tb ? 1 : 0, threads, bf16 ? 1 : 0});
    thread_local dnnl::stream stream(engine());
    memory am(plan.a, engine(), a.raw_data()), bm(plan.b, engine(), b.raw_data()),
        cm(plan.c, engine(), c.raw_data());
    Tensor scratch = Tensor::empty({static_cast<int64_t>((plan.scratchpad.get_size() + 3) / 4)}, DType::f32);
    memory sm(plan.scratchpad, engine(), scratch.raw_data());
    trace::Span span("kernel", bf16 ? "oneDNN matmul bf16" : "oneDNN matmul");
    plan.primitive.execute(
        stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}});
    stream.wait();
  } catch (const dnnl::error& e) {
    TANDEM_FAIL("matmul: oneDNN failed (" << e.what() << ", status " << static_cast<int>(e.status)
                                          << ") for [" << m << ", " << k << "] x [" << k << ", " << n << "]"
                                          << (ta ? " (first transposed)" : "")
                                          << (tb ? " (second transposed)" : ""));
  }
  return true;
}

#else

bool onednn_gemm(const Tensor&, bool, const Tensor&, bool, Tensor&, double, double) { return false; }

#endif

}  // namespace tandem::kernels::cpu
