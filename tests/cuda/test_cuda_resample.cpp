// upfirdn2d on a GPU against its CPU twin: the same values (float32 and float64) for up,
// down, negative pads, both filter orientations and a separable filter, and its gradient.
#include <vector>

#include "autograd/ops.h"
#include "kernels/resample.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

TEST_CASE("cuda upfirdn2d matches the CPU for up, down, crops and both filter orientations") {
  const std::vector<kernels::UpFirDn2dParams> cases = {
      {},
      {.up_x = 2, .up_y = 2, .pad_x0 = 2, .pad_x1 = 1, .pad_y0 = 2, .pad_y1 = 1},
      {.down_x = 2, .down_y = 2, .pad_x0 = 1, .pad_x1 = 1, .pad_y0 = 1, .pad_y1 = 1},
      {.up_x = 3,
       .up_y = 1,
       .down_x = 1,
       .down_y = 2,
       .pad_x0 = -1,
       .pad_x1 = 2,
       .pad_y0 = 3,
       .pad_y1 = -2,
       .flip_filter = true}};
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor x = random_cpu({2, 3, 17, 12}, dt, 300);
    for (const Tensor& f : {random_cpu({3, 4}, dt, 301), random_cpu({4}, dt, 302)})
      for (const kernels::UpFirDn2dParams& p : cases) {
        INFO(dtype_name(dt) << " filter " << shape_str(f.shape()) << " up " << p.up_x << " down "
                            << p.down_y);
        require_close(kernels::upfirdn2d(on_gpu(x), on_gpu(f), p), kernels::upfirdn2d(x, f, p), "upfirdn2d");
      }
  }
  const Tensor f = setup_filter({1, 3, 3, 1});
  Variable cpu(random_cpu({2, 3, 8, 8}, DType::f32, 303), true), gpu(on_gpu(cpu.data()), true);
  Variable loss_cpu = sum(square(downsample2d(upsample2d(cpu, f), f)));
  Variable loss_gpu = sum(square(downsample2d(upsample2d(gpu, on_gpu(f)), on_gpu(f))));
  require_close(loss_gpu.data(), loss_cpu.data(), "loss");
  loss_cpu.backward();
  loss_gpu.backward();
  require_close(gpu.grad(), cpu.grad(), "gradient");
}
