// The oneDNN convolutions of conv_onednn.h: a plan (the primitive, its memory descriptors,
// the reorders into and out of oneDNN's layouts) made once per shape, then one execution per
// convolution on the calling thread's stream. With the trace on (runtime/trace.h), each
// convolution and each reorder is a span of category "kernel" (a reorder's with its bytes):
// every layout conversion is accounted for.
#include "kernels/cpu/conv_onednn.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#if TANDEM_HAVE_ONEDNN
#include <omp.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "runtime/trace.h"
#endif

namespace tandem::kernels::cpu {

namespace {

constexpr int kUnset = -1;
std::atomic<int> g_backend{kUnset};
std::atomic<int> g_threads{kUnset};
std::atomic<int> g_layout{static_cast<int>(OnednnLayout::automatic)};

}  // namespace

CpuConvBackend cpu_conv_backend() {
  int backend = g_backend.load(std::memory_order_relaxed);
  if (backend != kUnset) return static_cast<CpuConvBackend>(backend);
  const char* env = std::getenv("TANDEM_CONV_BACKEND");
  std::string_view text = env == nullptr ? "" : env;
  CpuConvBackend parsed = CpuConvBackend::onednn;
  if (text == "eigen") {
    parsed = CpuConvBackend::eigen;
  } else {
    TANDEM_CHECK(text.empty() || text == "onednn",
                 "TANDEM_CONV_BACKEND=" << text << " is not a CPU convolution backend: eigen or onednn");
  }
  int expected = kUnset;
  g_backend.compare_exchange_strong(expected, static_cast<int>(parsed), std::memory_order_relaxed);
  return static_cast<CpuConvBackend>(g_backend.load(std::memory_order_relaxed));
}

void set_cpu_conv_backend(CpuConvBackend backend) {
  g_backend.store(static_cast<int>(backend), std::memory_order_relaxed);
}

void reset_cpu_conv_backend() { g_backend.store(kUnset, std::memory_order_relaxed); }

const char* cpu_conv_backend_name(CpuConvBackend backend) {
  return backend == CpuConvBackend::eigen ? "eigen" : "onednn";
}

bool onednn_built() { return TANDEM_HAVE_ONEDNN != 0; }

bool onednn_bf16_native() {
#if TANDEM_HAVE_ONEDNN
  // The ISA oneDNN dispatches to (the CPU's, capped by DNNL_MAX_CPU_ISA) is a bit set that
  // contains avx512_core_bf16's bits on every CPU with native bfloat16 (AMX included).
  static const bool native = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return native;
#else
  return false;
#endif
}

bool onednn_takes(DType dtype) {
  return onednn_built() && cpu_conv_backend() == CpuConvBackend::onednn &&
         (dtype == DType::f32 || (dtype == DType::bf16 && onednn_bf16_native()));
}

int cpu_conv_threads() {
  int threads = g_threads.load(std::memory_order_relaxed);
  if (threads != kUnset) return threads;
  const char* env = std::getenv("TANDEM_CPU_THREADS");
  int parsed = 1;
  if (env != nullptr && *env != '\0') {
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    TANDEM_CHECK(*end == '\0' && value >= 1 && value <= 1024,
                 "TANDEM_CPU_THREADS=" << env << " is not a thread count: a whole number from 1 to 1024");
    parsed = static_cast<int>(value);
  }
  int expected = kUnset;
  g_threads.compare_exchange_strong(expected, parsed, std::memory_order_relaxed);
  return g_threads.load(std::memory_order_relaxed);
}

void set_cpu_conv_threads(int threads) {
  TANDEM_CHECK(threads >= 1, "set_cpu_conv_threads: " << threads << " threads; needs at least 1");
  g_threads.store(threads, std::memory_order_relaxed);
}

OnednnLayout onednn_layout() { return static_cast<OnednnLayout>(g_layout.load(std::memory_order_relaxed)); }

void set_onednn_layout(OnednnLayout layout) {
  g_layout.store(static_cast<int>(layout), std::memory_order_relaxed);
}

#if TANDEM_HAVE_ONEDNN

namespace {

using conv_detail::Geometry;
using dnnl::memory;
using tag = dnnl::memory::format_tag;

enum class Pass { forward, backward_data, backward_weights };

const char* pass_name(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return "forward";
    case Pass::backward_data:
      return "backward data";
    case Pass::backward_weights:
      return "backward weights";
  }
  return "?";
}

// The trace's name for a pass's convolution (reorders are spans of their own).
const char* span_name(Pass pass) {
  switch (pass) {
    case Pass::forward:
      return "oneDNN conv forward";
    case Pass::backward_data:
      return "oneDNN conv backward data";
    case Pass::backward_weights:
      return "oneDNN conv backward weights";
  }
  return "oneDNN conv";
}

// Never destroyed: a static destructor could run while another thread still convolves.
const dnnl::engine& cpu_engine() {
  static auto* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// Every argument a plan depends on; conv2d geometry, then dilation, groups, threads, layout,
// and whether the inputs are bfloat16 (the output is float32 either way).
using Key = std::array<int64_t, 17>;

Key make_key(Pass pass, const Geometry& g, int64_t dilation, int64_t groups, int threads, OnednnLayout layout,
             bool bf16) {
  return {static_cast<int64_t>(pass),
          g.n,
          g.c,
          g.h,
          g.w,
          g.o,
          g.kh,
          g.kw,
          g.ho,
          g.wo,
          g.stride,
          g.padding,
          dilation,
          groups,
          threads,
          static_cast<int64_t>(layout),
          bf16 ? 1 : 0};
}

// One primitive with two inputs and one output (forward: src, weights -> dst; backward
// data: diff_dst, weights -> diff_src; backward weights: src, diff_dst -> diff_weights).
// user[i] is tandem's plain layout of argument i (inputs first), inner[i] the primitive's;
// where they differ, the plan reorders (inputs in, the output out).
struct Plan {
  dnnl::primitive primitive;
  std::array<int, 3> arg{};
  std::array<memory::desc, 3> user, inner;
  std::array<std::optional<dnnl::reorder>, 3> reorder;
  memory::desc scratchpad;
};

memory::desc plain_desc(const memory::dims& dims, tag format,
                        memory::data_type type = memory::data_type::f32) {
  return memory::desc(dims, type, format);
}

// The padding after the last row and column that makes oneDNN's output size exactly g's:
// smaller than g.padding where the geometry is a transposed convolution's with
// output_padding (the conv2d's input then has rows no output reads).
memory::dims right_padding(const Geometry& g, int64_t dilation) {
  auto one = [&](int64_t in, int64_t k, int64_t out) {
    const int64_t span = dilation * (k - 1) + 1;
    if ((in + 2 * g.padding - span) / g.stride + 1 == out) return g.padding;  // the usual case
    return (out - 1) * g.stride + span - in - g.padding;
  };
  return {one(g.h, g.kh, g.ho), one(g.w, g.kw, g.wo)};
}

std::unique_ptr<Plan> make_plan(Pass pass, const Geometry& g, int64_t dilation, int64_t groups,
                                OnednnLayout layout, bool bf16) {
  // The two inputs in the operand type, the output float32: x is the output of backward
  // data, the weight that of backward weights, y that of forward.
  using type = memory::data_type;
  const type in = bf16 ? type::bf16 : type::f32;
  const type x_type = pass == Pass::backward_data ? type::f32 : in;
  const type w_type = pass == Pass::backward_weights ? type::f32 : in;
  const type y_type = pass == Pass::forward ? type::f32 : in;
  const memory::dims x_dims{g.n, g.c, g.h, g.w}, y_dims{g.n, g.o, g.ho, g.wo};
  const memory::dims w_dims = groups == 1 ? memory::dims{g.o, g.c, g.kh, g.kw}
                                          : memory::dims{groups, g.o / groups, g.c / groups, g.kh, g.kw};
  const tag w_tag = groups == 1 ? tag::oihw : tag::goihw;
  const memory::desc x_user = plain_desc(x_dims, tag::nchw, x_type);
  const memory::desc y_user = plain_desc(y_dims, tag::nchw, y_type);
  const memory::desc w_user = plain_desc(w_dims, w_tag, w_type);
  // What the primitive is offered: the plain layout, or any it prefers.
  auto offered = [&](const memory::dims& dims, tag plain, type t) {
    return memory::desc(dims, t, layout == OnednnLayout::plain ? plain : tag::any);
  };
  const memory::desc x_any = offered(x_dims, tag::nchw, x_type), y_any = offered(y_dims, tag::nchw, y_type),
                     w_any = offered(w_dims, w_tag, w_type);
  const memory::dims strides{g.stride, g.stride}, dilates{dilation - 1, dilation - 1},
      padding{g.padding, g.padding}, padding_r = right_padding(g, dilation);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::engine& engine = cpu_engine();
  const auto algo = dnnl::algorithm::convolution_direct;
  // The forward pass itself, or the hint the backward passes are made from (every tensor
  // in the operand type, as a training forward would have them).
  const bool fwd = pass == Pass::forward;
  dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(
          fwd ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training, algo,
          fwd ? x_any : offered(x_dims, tag::nchw, in), fwd ? w_any : offered(w_dims, w_tag, in),
          fwd ? y_any : offered(y_dims, tag::nchw, in), strides, dilates, padding, padding_r),
      attr, engine);
  auto plan = std::make_unique<Plan>();
  std::array<memory::desc, 3> inner;
  if (pass == Pass::forward) {
    plan->primitive = dnnl::convolution_forward(forward);
    plan->arg = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    plan->user = {x_user, w_user, y_user};
    inner = {forward.src_desc(), forward.weights_desc(), forward.dst_desc()};
    plan->scratchpad = forward.scratchpad_desc();
  } else if (pass == Pass::backward_data) {
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algo, x_any, w_any, y_any, strides, dilates, padding,
                                              padding_r),
        attr, engine, forward);
    plan->primitive = dnnl::convolution_backward_data(pd);
    plan->arg = {DNNL_ARG_DIFF_DST, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_SRC};
    plan->user = {y_user, w_user, x_user};
    inner = {pd.diff_dst_desc(), pd.weights_desc(), pd.diff_src_desc()};
    plan->scratchpad = pd.scratchpad_desc();
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(algo, x_any, w_any, y_any, strides, dilates, padding,
                                                 padding_r),
        attr, engine, forward);
    plan->primitive = dnnl::convolution_backward_weights(pd);
    plan->arg = {DNNL_ARG_SRC, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_WEIGHTS};
    plan->user = {x_user, y_user, w_user};
    inner = {pd.src_desc(), pd.diff_dst_desc(), pd.diff_weights_desc()};
    plan->scratchpad = pd.scratchpad_desc();
  }
  plan->inner = inner;
  for (int i = 0; i < 3; ++i) {
    if (plan->inner[i] == plan->user[i]) continue;
    plan->reorder[i] =
        i < 2 ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, plan->user[i], engine, plan->inner[i]))
              : dnnl::reorder(dnnl::reorder::primitive_desc(engine, plan->inner[i], engine, plan->user[i]));
  }
  return plan;
}

// The plans of the process, made on first use of their key; references stay valid forever.
const Plan& plan_for(const Key& key, Pass pass, const Geometry& g, int64_t dilation, int64_t groups,
                     OnednnLayout layout, bool bf16) {
  static std::mutex mutex;
  static auto* plans = new std::map<Key, std::unique_ptr<Plan>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, make_plan(pass, g, dilation, groups, layout, bf16)).first;
  return *it->second;
}

// A float32 buffer of at least `bytes` bytes from tandem's allocator.
Tensor buffer(size_t bytes) { return Tensor::empty({static_cast<int64_t>((bytes + 3) / 4)}, DType::f32); }

std::string describe(Pass pass, const Geometry& g, int64_t dilation, int64_t groups) {
  std::ostringstream out;
  out << pass_name(pass) << " of input [" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << "], weight ["
      << g.o << ", " << g.c / std::max<int64_t>(1, groups) << ", " << g.kh << ", " << g.kw << "], output ["
      << g.n << ", " << g.o << ", " << g.ho << ", " << g.wo << "], stride " << g.stride << ", padding "
      << g.padding << ", dilation " << dilation << ", groups " << groups;
  return out.str();
}

// Runs pass on tensors a, b (inputs) and out (output), in the plan's argument order.
bool run(const char* op, Pass pass, const Tensor& a, const Tensor& b, Tensor& out, const Geometry& g,
         int64_t dilation, int64_t groups) {
  if (!onednn_takes(a.dtype())) return false;
  const bool bf16 = a.dtype() == DType::bf16;
  if (g.n == 0) {
    out.zero_();
    return true;
  }
  TANDEM_CHECK(groups >= 1 && dilation >= 1 && g.c % groups == 0 && g.o % groups == 0,
               op << ": " << describe(pass, g, dilation, groups) << ": channels must divide into groups");
  const memory::dims padding_r = right_padding(g, dilation);
  if (padding_r[0] < 0 || padding_r[1] < 0) return false;  // a crop oneDNN does not take: Eigen's
  const int threads = cpu_conv_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  OnednnLayout layout = onednn_layout();
  if (layout == OnednnLayout::automatic)
    layout = g.c / groups < kPlainBelowChannels ? OnednnLayout::plain : OnednnLayout::preferred;
  try {
    const Plan& plan = plan_for(make_key(pass, g, dilation, groups, threads, layout, bf16), pass, g, dilation,
                                groups, layout, bf16);
    const dnnl::engine& engine = cpu_engine();
    thread_local dnnl::stream stream(cpu_engine());
    std::array<const Tensor*, 3> tensors{&a, &b, &out};
    std::array<memory, 3> user, inner;
    std::array<Tensor, 3> held;  // the reorder buffers, alive until the stream waits
    for (int i = 0; i < 3; ++i) {
      user[i] = memory(plan.user[i], engine, tensors[i]->raw_data());
      if (plan.reorder[i]) {
        held[i] = buffer(plan.inner[i].get_size());
        inner[i] = memory(plan.inner[i], engine, held[i].raw_data());
        if (i < 2) {
          trace::Span span("kernel", "oneDNN reorder in");  // a CPU stream runs it here and now
          if (span.on()) span.set_args({trace::arg("bytes", static_cast<int64_t>(plan.inner[i].get_size()))});
          plan.reorder[i]->execute(stream, user[i], inner[i]);
        }
      } else {
        inner[i] = user[i];
      }
    }
    Tensor scratch = buffer(plan.scratchpad.get_size());
    memory scratch_memory(plan.scratchpad, engine, scratch.raw_data());
    {
      trace::Span span("kernel", span_name(pass));
      plan.primitive.execute(stream, {{plan.arg[0], inner[0]},
                                      {plan.arg[1], inner[1]},
                                      {plan.arg[2], inner[2]},
                                      {DNNL_ARG_SCRATCHPAD, scratch_memory}});
    }
    if (plan.reorder[2]) {
      trace::Span span("kernel", "oneDNN reorder out");
      if (span.on()) span.set_args({trace::arg("bytes", static_cast<int64_t>(plan.inner[2].get_size()))});
      plan.reorder[2]->execute(stream, inner[2], user[2]);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    TANDEM_FAIL(op << ": oneDNN failed (" << e.what() << ", status " << static_cast<int>(e.status) << ") for "
                   << describe(pass, g, dilation, groups));
  }
  return true;
}

}  // namespace

bool onednn_conv_forward(const char* op, const Tensor& x, const Tensor& weight, Tensor& y,
                         const Geometry& g) {
  return run(op, Pass::forward, x, weight, y, g, g.dilation, g.groups);
}

bool onednn_conv_backward_input(const char* op, const Tensor& grad, const Tensor& weight, Tensor& dx,
                                const Geometry& g) {
  return run(op, Pass::backward_data, grad, weight, dx, g, g.dilation, g.groups);
}

bool onednn_conv_backward_weight(const char* op, const Tensor& grad, const Tensor& x, Tensor& dweight,
                                 const Geometry& g) {
  return run(op, Pass::backward_weights, x, grad, dweight, g, g.dilation, g.groups);
}

#else  // no oneDNN in this build: the Eigen kernels run every convolution.

bool onednn_conv_forward(const char*, const Tensor&, const Tensor&, Tensor&, const conv_detail::Geometry&) {
  return false;
}
bool onednn_conv_backward_input(const char*, const Tensor&, const Tensor&, Tensor&,
                                const conv_detail::Geometry&) {
  return false;
}
bool onednn_conv_backward_weight(const char*, const Tensor&, const Tensor&, Tensor&,
                                 const conv_detail::Geometry&) {
  return false;
}

#endif

}  // namespace tandem::kernels::cpu
