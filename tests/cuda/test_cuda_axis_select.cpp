// argmax/argmin along an axis, gather_axis and scatter_axis, and the ops built on them
// (max, logsumexp, softmax, cross_entropy), on a GPU against their CPU twins: the same
// positions (ties included) and bitwise values for the selections.
#include <vector>

#include "autograd/ops.h"
#include "kernels/axis_select.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("cuda axis select: argmax, argmin, gather and scatter match the CPU on every axis") {
  for (DType dt : {DType::f32, DType::f64}) {
    // Values on a coarse grid (ties likely) over [3, 5, 4] and a long axis.
    for (const Shape& shape : {Shape{3, 5, 4}, Shape{2, 4099}}) {
      Tensor x = random_cpu(shape, dt, 90 + shape.size());
      std::vector<double> v = x.to_vector();
      for (double& e : v) e = static_cast<double>(static_cast<int>(e * 4));
      x = Tensor::from_values(shape, v, dt);
      for (int64_t axis = 0; axis < static_cast<int64_t>(shape.size()); ++axis) {
        INFO(dtype_name(dt) << shape_str(shape) << " axis " << axis);
        const Tensor imax = kernels::argmax_axis(x, axis, true), imin = kernels::argmin_axis(x, axis, true);
        CHECK(kernels::argmax_axis(on_gpu(x), axis, true).to(Device::cpu()).to_vector() == imax.to_vector());
        CHECK(kernels::argmin_axis(on_gpu(x), axis, true).to(Device::cpu()).to_vector() == imin.to_vector());
        const Tensor top = kernels::gather_axis(x, axis, imax);
        CHECK(kernels::gather_axis(on_gpu(x), axis, on_gpu(imax)).to_vector() == top.to_vector());
        CHECK(kernels::scatter_axis(on_gpu(top), shape, axis, on_gpu(imax)).to_vector() ==
              kernels::scatter_axis(top, shape, axis, imax).to_vector());
      }
    }
  }
}

TEST_CASE("cuda axis select: softmax, logsumexp and cross_entropy with their gradients match the CPU") {
  Tensor logits = random_cpu({16, 10}, DType::f32, 95, -4.0, 4.0);
  Tensor target = Tensor::empty({16}, DType::i64);
  for (int64_t i = 0; i < 16; ++i) target.data<int64_t>()[i] = (7 * i) % 10;
  Variable cpu(logits, true), gpu(on_gpu(logits), true);
  require_close(softmax(gpu, 1).data(), softmax(cpu, 1).data(), "softmax");
  require_close(logsumexp(gpu, 0).data(), logsumexp(cpu, 0).data(), "logsumexp");
  Variable loss_cpu = cross_entropy(cpu, target, {.label_smoothing = 0.1});
  Variable loss_gpu = cross_entropy(gpu, on_gpu(target), {.label_smoothing = 0.1});
  require_close(loss_gpu.data(), loss_cpu.data(), "cross_entropy");
  loss_cpu.backward();
  loss_gpu.backward();
  require_close(gpu.grad(), cpu.grad(), "cross_entropy gradient");
}
