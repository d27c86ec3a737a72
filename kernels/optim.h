// Fused multi-tensor optimizer updates: one call updates a whole group of parameters that
// share a device and a dtype (float32 or float64); on CUDA the group is one kernel launch.
//
// Contract:
// - Entry i of every list belongs to parameter i and has its shape; every tensor is
//   defined and on the parameters' device and dtype. Errors name the op, the list, the
//   index and both tensors. The tensors are updated in place (the lists hold handles).
// - The formulas are those of autograd/optim.h, evaluated in the parameter's dtype one
//   rounded operation at a time (no fused multiply-add), so the CPU and CUDA kernels give
//   the same bits. Constants are computed in double, then rounded to the dtype.
//   Adam, t = step.step:  g += wd p (Adam only);  p *= 1 - lr wd (AdamW only);
//     m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g;
//     p -= (lr / (1 - b1^t)) * (m / (sqrt(v) / sqrt(1 - b2^t) + eps)).
//   SGD:  g += wd p (when wd != 0);  when momentum != 0:
//     b = first ? g : momentum b + (1 - dampening) g;  g = nesterov ? g + momentum b : b;
//     p -= lr g.
// - sgd_update_ takes one momentum buffer per parameter when momentum != 0, and an empty
//   list otherwise. With `first` set the buffers' old contents are not read.
// - device_scalars (CUDA only; for steps captured into a CUDA graph, whose kernel
//   arguments are fixed at capture): the per-step constants are read at run time from
//   this device array of doubles instead, rounded to the dtype on the device exactly as
//   the host would: Adam {step_size, bc2_sqrt, decay} (AdamCoeffs; the decay is applied
//   whenever AdamW's weight decay is non-zero, a factor 1 changing nothing), SGD {lr}.
//   step.lr and step.step then only decide nothing but the checks.
// - graph_scalars_array(capture, device, count) (CUDA devices only, else an Error): device
//   memory for device_scalars, `count` doubles from cudaMalloc, kept alive by `capture`.
//   Never a block of the capture's memory pool: there a block freed earlier in the captured
//   step (a backward's temporary) is handed out again, and every replay would overwrite it
//   after the host wrote the constants and before the update read them.
//   write_graph_scalars(array, device, values) copies the constants in before a launch (a
//   synchronous copy on the legacy stream, which the graph's launch follows).
//   With TANDEM_FAULT_GRAPH_SCALARS_FROM_POOL set in the environment the array is taken
//   from the capture's pool as it once was: the defect, put back on purpose so that the GPU
//   proof (scripts/gpu_proof.sh) can show its test fail. Never set it otherwise.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/step_capture.h"
#include "runtime/tensor.h"

namespace tandem::kernels {

struct AdamStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;                  // AdamW: p *= 1 - lr wd instead of g += wd p
  int64_t step = 1;                        // t, the parameters' step count after this update (>= 1)
  const double* device_scalars = nullptr;  // see the contract
};

struct SgdStep {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool first = false;                      // the momentum buffers are new: b = g
  const double* device_scalars = nullptr;  // see the contract
};

void adam_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                  const std::vector<Tensor>& exp_avg, const std::vector<Tensor>& exp_avg_sq,
                  const AdamStep& step);

void sgd_update_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& momentum_buffers, const SgdStep& step);

inline constexpr const char* kGraphScalarsFaultEnv = "TANDEM_FAULT_GRAPH_SCALARS_FROM_POOL";
double* graph_scalars_array(StepCapture& capture, Device device, size_t count);
void write_graph_scalars(double* array, Device device, const std::vector<double>& values);

// The per-step constants of Adam, as both kernels use them.
struct AdamCoeffs {
  double beta1, beta2, eps;
  double l2;         // Adam's weight decay, added to the gradient (0 for AdamW)
  double decay;      // AdamW's factor 1 - lr wd on the parameter (1 for Adam)
  double step_size;  // lr / (1 - beta1^t)
  double bc2_sqrt;   // sqrt(1 - beta2^t)
};
AdamCoeffs adam_coeffs(const AdamStep& step);

}  // namespace tandem::kernels
