// StyleGAN's composed networks on a GPU against the CPU: the same modules (same seeds), one
// moved to the GPU, give the same outputs and parameter gradients.
#include <memory>
#include <vector>

#include "autograd/nn_stylegan_nets.h"
#include "autograd/ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

void check_module(nn::Module& cpu, nn::Module& gpu, const Tensor& x, const std::string& what) {
  gpu.to(Device::cuda(0));
  const Variable y_cpu = cpu(Variable(x)), y_gpu = gpu(Variable(on_gpu(x)));
  require_close(y_gpu.data(), y_cpu.data(), what + " output");
  sum(square(y_cpu)).backward();
  sum(square(y_gpu)).backward();
  const std::vector<Variable> pc = cpu.parameters(), pg = gpu.parameters();
  for (size_t i = 0; i < pc.size(); ++i) require_close(pg[i].grad(), pc[i].grad(), what + " gradient");
}

}  // namespace

TEST_CASE("cuda StyleGAN nets: ResidualBlock and MappingNetwork match the CPU") {
  Generator g1(41), g2(41);
  nn::ResidualBlock block_cpu(2, 3, {}, g1), block_gpu(2, 3, {}, g2);
  check_module(block_cpu, block_gpu, random_cpu({2, 2, 5, 5}, DType::f32, 140), "ResidualBlock");
  Generator g3(42), g4(42);
  nn::MappingNetwork net_cpu(8, 6, {.layers = 3}, g3), net_gpu(8, 6, {.layers = 3}, g4);
  check_module(net_cpu, net_gpu, random_cpu({4, 8}, DType::f32, 141), "MappingNetwork");
}
