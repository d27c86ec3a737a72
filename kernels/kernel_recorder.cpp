// The kernel recorder of kernel_recorder.h.
#include "kernels/kernel_recorder.h"

#include <atomic>
#include <mutex>
#include <sstream>

#include "kernels/conv_geometry.h"

namespace tandem::kernels {

namespace {

std::atomic<bool> g_on{false};
std::mutex g_mutex;
KernelRecord g_record;
thread_local int t_conv_depth = 0;  // recorded convolutions running on this thread

template <typename Call>
void add(std::vector<std::pair<Call, int64_t>>& list, const Call& call) {
  for (auto& [seen, count] : list)
    if (seen == call) {
      ++count;
      return;
    }
  list.emplace_back(call, 1);
}

}  // namespace

const char* conv_op_name(ConvOp op) {
  switch (op) {
    case ConvOp::conv2d:
      return "conv2d";
    case ConvOp::conv2d_backward_input:
      return "conv2d_backward_input";
    case ConvOp::conv2d_backward_weight:
      return "conv2d_backward_weight";
    case ConvOp::conv_transpose2d:
      return "conv_transpose2d";
    case ConvOp::conv_transpose2d_backward_input:
      return "conv_transpose2d_backward_input";
    case ConvOp::conv_transpose2d_backward_weight:
      return "conv_transpose2d_backward_weight";
  }
  return "?";
}

bool ConvCall::operator==(const ConvCall& o) const {
  return op == o.op && a == o.a && b == o.b && out == o.out && params.stride == o.params.stride &&
         params.padding == o.params.padding && params.output_padding == o.params.output_padding &&
         params.dilation == o.params.dilation && params.groups == o.params.groups && dtype == o.dtype;
}

std::string ConvCall::str() const {
  const bool backward_weight =
      op == ConvOp::conv2d_backward_weight || op == ConvOp::conv_transpose2d_backward_weight;
  const bool forward = op == ConvOp::conv2d || op == ConvOp::conv_transpose2d;
  std::ostringstream os;
  os << conv_op_name(op) << (forward ? " x " : " dy ") << shape_str(a) << (backward_weight ? " x " : " w ")
     << shape_str(b) << " -> " << shape_str(out) << " s" << params.stride << " p" << params.padding;
  if (params.output_padding != 0) os << " op" << params.output_padding;
  if (params.dilation != 1) os << " d" << params.dilation;
  if (params.groups != 1) os << " g" << params.groups;
  if (dtype != DType::f32) os << " " << dtype_name(dtype);
  return os.str();
}

std::string GemmCall::str() const {
  std::ostringstream os;
  os << "gemm " << m << "x" << n << "x" << k << " " << (transpose_a ? "T" : "N") << (transpose_b ? "T" : "N");
  if (dtype != DType::f32) os << " " << dtype_name(dtype);
  return os.str();
}

bool kernel_recording() { return g_on.load(std::memory_order_relaxed); }

void start_kernel_recording() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_record = {};
  g_on.store(true, std::memory_order_relaxed);
}

KernelRecord stop_kernel_recording() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_on.store(false, std::memory_order_relaxed);
  KernelRecord out = std::move(g_record);
  g_record = {};
  return out;
}

double conv_call_flops(const ConvCall& call) {
  // The conv2d geometry behind the call: for conv2d ops `out` or `a` is the output side.
  conv_detail::Geometry g{};
  switch (call.op) {
    case ConvOp::conv2d:
      g = conv_detail::conv_geometry("flops", call.a, call.b, call.params);
      break;
    case ConvOp::conv2d_backward_input:
      g = conv_detail::conv_geometry("flops", call.out, call.b, call.params);
      break;
    case ConvOp::conv2d_backward_weight:
      g = conv_detail::conv_geometry("flops", call.b, call.out, call.params);
      break;
    case ConvOp::conv_transpose2d:
      g = conv_detail::transpose_geometry("flops", call.a, call.b, call.params);
      break;
    case ConvOp::conv_transpose2d_backward_input:
      g = conv_detail::transpose_geometry("flops", call.out, call.b, call.params);
      break;
    case ConvOp::conv_transpose2d_backward_weight:
      g = conv_detail::transpose_geometry("flops", call.b, call.out, call.params);
      break;
  }
  return 2.0 * static_cast<double>(g.n) * static_cast<double>(g.o) * static_cast<double>(g.l()) *
         static_cast<double>(g.k());
}

double gemm_call_flops(const GemmCall& call) {
  return 2.0 * static_cast<double>(call.m) * static_cast<double>(call.n) * static_cast<double>(call.k);
}

ConvRecordScope::ConvRecordScope(ConvOp op, const Shape& a, const Shape& b, const Shape& out,
                                 const Conv2dParams& params, DType dtype) {
  if (!kernel_recording()) return;
  active_ = true;
  ++t_conv_depth;
  if (t_conv_depth > 1) return;  // a convolution inside a convolution: part of the outer one
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_on.load(std::memory_order_relaxed)) add(g_record.convs, ConvCall{op, a, b, out, params, dtype});
}

ConvRecordScope::~ConvRecordScope() {
  if (active_) --t_conv_depth;
}

void record_gemm(const GemmCall& call) {
  if (t_conv_depth > 0) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_on.load(std::memory_order_relaxed)) add(g_record.gemms, call);
}

}  // namespace tandem::kernels
