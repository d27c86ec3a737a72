// interpolate_bilinear and its adjoint on a GPU against their CPU twins (float32 and
// float64), up, down and at non-integer scales, and the gradient through the op.
#include <vector>

#include "autograd/ops.h"
#include "kernels/bilinear.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("cuda interpolate_bilinear and its adjoint match the CPU up, down and at odd scales") {
  struct Size {
    int64_t in_h, in_w, out_h, out_w;
  };
  for (DType dt : {DType::f32, DType::f64})
    for (const Size& s :
         {Size{16, 16, 32, 32}, Size{32, 24, 16, 12}, Size{17, 9, 40, 5}, Size{1, 7, 3, 13}}) {
      INFO(dtype_name(dt) << " [" << s.in_h << ", " << s.in_w << "] -> [" << s.out_h << ", " << s.out_w
                          << "]");
      const Tensor x = random_cpu({2, 3, s.in_h, s.in_w}, dt, 310);
      require_close(kernels::interpolate_bilinear(on_gpu(x), s.out_h, s.out_w),
                    kernels::interpolate_bilinear(x, s.out_h, s.out_w), "interpolate_bilinear");
      const Tensor g = random_cpu({2, 3, s.out_h, s.out_w}, dt, 311);
      require_close(kernels::interpolate_bilinear_adjoint(on_gpu(g), s.in_h, s.in_w),
                    kernels::interpolate_bilinear_adjoint(g, s.in_h, s.in_w), "interpolate_bilinear_adjoint");
    }
  Variable cpu(random_cpu({2, 3, 9, 11}, DType::f32, 312), true), gpu(on_gpu(cpu.data()), true);
  Variable loss_cpu = sum(square(interpolate_bilinear(cpu, 14, 6)));
  Variable loss_gpu = sum(square(interpolate_bilinear(gpu, 14, 6)));
  require_close(loss_gpu.data(), loss_cpu.data(), "loss");
  loss_cpu.backward();
  loss_gpu.backward();
  require_close(gpu.grad(), cpu.grad(), "gradient");
}
