// permute and transpose on a GPU against their CPU twins: bitwise the same elements (a copy)
// for every permutation of a 4-D tensor, the gradient (the inverse permutation) included,
// and the same named errors.
#include <algorithm>
#include <vector>

#include "autograd/ops.h"
#include "kernels/shape_ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("cuda permute: every permutation of a 4-D tensor matches the CPU bitwise, gradient included") {
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = random_cpu({2, 3, 4, 5}, dt, 120);
    std::vector<int64_t> dims{0, 1, 2, 3};
    do {
      INFO(dtype_name(dt) << " dims " << dims[0] << dims[1] << dims[2] << dims[3]);
      const Tensor want = kernels::permute(x, dims);
      const Tensor got = kernels::permute(on_gpu(x), dims);
      CHECK(got.shape() == want.shape());
      CHECK(got.to(Device::cpu()).to_vector() == want.to_vector());
    } while (std::next_permutation(dims.begin(), dims.end()));
    Variable cpu(x, true), gpu(on_gpu(x), true);
    const Tensor w = random_cpu({5, 3, 4, 2}, dt, 121);
    sum(mul(transpose(cpu, 0, 3), Variable(w))).backward();
    sum(mul(transpose(gpu, 0, 3), Variable(on_gpu(w)))).backward();
    CHECK(gpu.grad().to(Device::cpu()).to_vector() == cpu.grad().to_vector());
  }
  CHECK(kernels::permute(on_gpu(Tensor::zeros({2, 0, 3})), {2, 0, 1}).shape() == Shape{3, 2, 0});
  const std::string cpu_error = error_of([] { kernels::permute(Tensor::zeros({2, 3}), {1, 1}); });
  CHECK_FALSE(cpu_error.empty());  // a repeated dim is refused, and alike on either device
  CHECK(error_of([] { kernels::permute(on_gpu(Tensor::zeros({2, 3})), {1, 1}); }) == cpu_error);
}
