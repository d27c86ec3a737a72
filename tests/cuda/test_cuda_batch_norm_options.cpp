// BatchNorm1d on [N, C, L] with PyTorch's options (affine, track_running_stats) on the GPU
// against the same module on the CPU: training output, input and parameter gradients,
// running statistics, and eval mode (running statistics, or the batch's without them).
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

struct Outputs {
  Tensor y, dx, dgamma, running_mean, eval_y;
};

Outputs run(nn::BatchNorm& bn, const Tensor& x, const Tensor& w) {
  bn.train();
  Variable xv(x.clone(), true);
  Variable y = bn.forward(xv);
  sum(mul(y, Variable(w))).backward();
  Outputs out{y.data(), xv.grad(), bn.affine ? bn.weight.grad() : Tensor(), bn.running_mean, Tensor()};
  bn.eval();
  out.eval_y = bn.forward(Variable(x)).data();
  return out;
}

}  // namespace

TEST_CASE("cuda BatchNorm1d on [N, C, L] with and without affine and running statistics matches the CPU") {
  struct Case {
    nn::BatchNormOptions options;
    DType dtype;
    std::string what;
  };
  const std::vector<Case> cases = {
      {{}, DType::f32, "default"},
      {{.affine = false}, DType::f32, "affine = false"},
      {{.track_running_stats = false}, DType::f32, "track_running_stats = false"},
      {{.affine = false, .track_running_stats = false}, DType::f64, "neither, float64"},
  };
  const Shape shapes[] = {{5, 3, 7}, {64, 16, 33}};
  uint64_t seed = 0xB17C0000;
  for (const Case& c : cases)
    for (const Shape& shape : shapes) {
      const std::string what = c.what + " " + shape_str(shape);
      Tensor x = random_cpu(shape, c.dtype, ++seed, 2.0, 4.0);
      Tensor w = random_cpu(shape, c.dtype, ++seed);
      nn::BatchNorm1d cpu(shape[1], c.options), gpu(shape[1], c.options);
      gpu.to(Device::cuda(0));
      Outputs want = run(cpu, x, w);
      Outputs got = run(gpu, on_gpu(x), on_gpu(w));
      require_close(got.y, want.y, "y " + what);
      require_close(got.dx, want.dx, "dx " + what);
      require_close(got.eval_y, want.eval_y, "eval y " + what);
      if (c.options.affine) require_close(got.dgamma, want.dgamma, "dgamma " + what);
      if (c.options.track_running_stats)
        require_close(got.running_mean, want.running_mean, "running_mean " + what);
    }
}
