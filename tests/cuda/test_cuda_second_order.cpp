// Second-order gradients on the GPU against the same computation on the CPU, float32 and
// float64: a WGAN-GP penalty of a small critic made of every op whose second-order rule is
// a composition of other ops (conv2d, conv_transpose2d, their gradient ops, avg_pool2x,
// upsample_nearest2x, concat, slice, bce_with_logits), its value, grad_x and the
// parameter gradients of its backward.
#include "autograd/grad.h"
#include "autograd/ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// x [N, 2, 8, 8] -> conv k4 s2 p1 -> [N, 3, 4, 4] -> conv_transpose k4 s2 p1 -> [N, 2, 8, 8]
// -> avg_pool -> [N, 2, 4, 4], concatenated with a slice of it and an upsampled pool of x
// -> conv k3 s1 p1 -> [N, 1, 4, 4] -> bce_with_logits against 0.5, summed per sample.
Variable critic(const Variable& x, const std::vector<Variable>& p) {
  Variable h = leaky_relu(conv2d(x, p[0], p[1], {.stride = 2, .padding = 1}), 0.2);
  h = tanh(conv_transpose2d(h, p[2], p[3], {.stride = 2, .padding = 1}));
  h = avg_pool2x(h);
  Variable skip = upsample_nearest2x(avg_pool2x(avg_pool2x(x)));
  h = concat({h, slice(h, 1, 1, 1), skip}, 1);
  Variable logits = conv2d(h, p[4], p[5], {.stride = 1, .padding = 1});
  Variable targets(Tensor::full(logits.shape(), 0.5, logits.dtype(), logits.device()), false);
  return sum(flatten(bce_with_logits(logits, targets)), 1);
}

struct Result {
  Tensor penalty, gx;
  std::vector<Tensor> grads;
};

Result penalty_and_grads(DType dt, Device device) {
  Variable x(random_cpu({2, 2, 8, 8}, dt, 900).to(device), true);
  std::vector<Variable> p;
  uint64_t seed = 901;
  for (const Shape& s :
       {Shape{3, 2, 4, 4}, Shape{3}, Shape{3, 2, 4, 4}, Shape{2}, Shape{1, 5, 3, 3}, Shape{1}})
    p.emplace_back(random_cpu(s, dt, seed++).to(device), true);
  Variable gx = grad({sum(critic(x, p))}, {x}, {}, {.create_graph = true})[0];
  Variable penalty = mean(square(add_scalar(sqrt(sum(square(flatten(gx)), 1)), -1.0)));
  penalty.backward();
  Result r{penalty.data(), gx.data(), {}};
  for (const Variable& v : p) r.grads.push_back(v.grad());
  return r;
}

}  // namespace

TEST_CASE(
    "cuda second order: a WGAN-GP penalty through conv, pooling, concat, slice and bce matches the CPU") {
  for (DType dt : {DType::f32, DType::f64}) {
    Result cpu = penalty_and_grads(dt, Device::cpu()), gpu = penalty_and_grads(dt, Device::cuda());
    std::string tag = dtype_name(dt);
    require_close(gpu.penalty, cpu.penalty, tag + " penalty");
    require_close(gpu.gx, cpu.gx, tag + " grad_x D");
    for (size_t k = 0; k < cpu.grads.size(); ++k) {
      REQUIRE(cpu.grads[k].defined() == gpu.grads[k].defined());
      if (cpu.grads[k].defined())
        require_close(gpu.grads[k], cpu.grads[k], tag + " parameter " + std::to_string(k));
    }
    // Every parameter, the last bias too, reaches the penalty: bce's gradient is
    // sigmoid(logits) - t, which depends on it.
    for (size_t k = 0; k < cpu.grads.size(); ++k) CHECK(cpu.grads[k].defined());
  }
}
