// Spectral normalisation on a GPU against the CPU: the same layers (same seeds), one moved
// to the GPU, give the same outputs, power-iteration vectors and weight gradients over a few
// training forwards, and the same in eval mode.
#include <memory>
#include <vector>

#include "autograd/nn.h"
#include "autograd/nn_spectral_norm.h"
#include "autograd/ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("cuda spectral norm: SN(Conv2d) and SN(ConvTranspose2d) match the CPU") {
  for (bool transposed : {false, true}) {
    auto make = [transposed] {
      Generator gen(21);
      std::shared_ptr<nn::Module> layer;
      if (transposed) {
        layer = std::make_shared<nn::ConvTranspose2d>(2, 3, 3, 2, 1, 1, true, gen);
      } else {
        layer = std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1, true, gen);
      }
      return std::make_shared<nn::SpectralNorm>(layer, nn::SpectralNormOptions{}, gen);
    };
    auto cpu = make(), gpu = make();
    gpu->to(Device::cuda(0));
    const Tensor x = random_cpu({2, 2, 4, 4}, DType::f32, 130);
    for (int step = 0; step < 3; ++step) {
      if (step == 2) {
        cpu->eval();
        gpu->eval();
      }
      INFO((transposed ? "ConvTranspose2d" : "Conv2d") << ", step " << step);
      const Variable y_cpu = (*cpu)(Variable(x)), y_gpu = (*gpu)(Variable(on_gpu(x)));
      require_close(y_gpu.data(), y_cpu.data(), "output");
      require_close(gpu->buffers()[0], cpu->buffers()[0], "u");
      require_close(gpu->buffers()[1], cpu->buffers()[1], "v");
      cpu->zero_grad();
      gpu->zero_grad();
      sum(square(y_cpu)).backward();
      sum(square(y_gpu)).backward();
      require_close(gpu->parameters()[0].grad(), cpu->parameters()[0].grad(), "weight gradient");
    }
  }
}
