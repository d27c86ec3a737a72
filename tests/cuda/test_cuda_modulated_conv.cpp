// StyleGAN2's modulated convolution (autograd/nn_stylegan.h) on the GPU against the CPU,
// float32 and float64: its value and an R1-style penalty (grad_x with create_graph, then
// backward), so the grouped convolution over the batch runs in both orders of gradient,
// demodulated and not.
#include "autograd/grad.h"
#include "autograd/nn_stylegan.h"
#include "autograd/ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

struct Result {
  Tensor y, penalty, gx, gweight, gstyles;
};

Result run(DType dt, Device device, bool demodulate, nn::ModulatedForm form) {
  Variable x(random_cpu({3, 4, 6, 6}, dt, 950).to(device), true);
  Variable weight(random_cpu({5, 4, 3, 3}, dt, 951).to(device), true);
  Variable styles(random_cpu({3, 4}, dt, 952, 0.5, 1.5).to(device), true);
  Variable y = nn::modulated_conv2d(x, weight, styles, demodulate, {.padding = 1}, form);
  Variable gx = grad({sum(square(y))}, {x}, {}, {.create_graph = true})[0];
  Variable penalty = sum(square(gx));
  penalty.backward();
  return {y.data(), penalty.data(), gx.data(), weight.grad(), styles.grad()};
}

}  // namespace

TEST_CASE("cuda modulated_conv2d and an R1 penalty through it match the CPU") {
  for (DType dt : {DType::f32, DType::f64})
    for (bool demodulate : {true, false})
      for (nn::ModulatedForm form : {nn::ModulatedForm::grouped, nn::ModulatedForm::scaled}) {
        const std::string tag = std::string(dtype_name(dt)) + (demodulate ? " demodulated" : "") +
                                (form == nn::ModulatedForm::scaled ? " scaled" : " grouped");
        Result cpu = run(dt, Device::cpu(), demodulate, form),
               gpu = run(dt, Device::cuda(), demodulate, form);
        require_close(gpu.y, cpu.y, tag + " output");
        require_close(gpu.penalty, cpu.penalty, tag + " penalty");
        require_close(gpu.gx, cpu.gx, tag + " grad_x");
        REQUIRE(cpu.gweight.defined());
        REQUIRE(cpu.gstyles.defined());
        require_close(gpu.gweight, cpu.gweight, tag + " weight gradient");
        require_close(gpu.gstyles, cpu.gstyles, tag + " styles gradient");
      }
}
