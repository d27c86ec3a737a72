// Grouped and dilated convolutions on the GPU against their CPU twins (themselves checked
// against a direct loop in tests/kernels/test_conv_grouped.cpp): the six ops of
// kernels/conv.h through cuDNN (mode on) and through im2col + cuBLAS (mode off), float32
// and float64, on grouped, depthwise, dilated and strided shapes with batch 1 and odd sizes.
// With the mode off, no call may reach cuDNN; with it on and cuDNN built, the float32
// grouped conv2d must run on cuDNN (its group count is set on the descriptor).
#include "kernels/conv.h"
#include "kernels/conv_algorithm.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;
using kernels::Conv2dParams;
using kernels::ConvAlgorithmMode;

namespace {

// Restores the mode from the environment when a test ends, pass or fail.
struct ModeGuard {
  ~ModeGuard() { kernels::reset_conv_algorithm_mode(); }
};

struct Case {
  Shape x, w;
  Conv2dParams p;
  bool transposed;
};

void check_case(const Case& c, ConvAlgorithmMode mode, DType dt, uint64_t seed) {
  std::ostringstream os;
  os << (c.transposed ? "conv_transpose2d" : "conv2d") << " x " << shape_str(c.x) << " w " << shape_str(c.w)
     << " stride " << c.p.stride << " pad " << c.p.padding << " output_padding " << c.p.output_padding
     << " dilation " << c.p.dilation << " groups " << c.p.groups << " " << dtype_name(dt) << " mode "
     << kernels::conv_algorithm_mode_name(mode);
  const std::string what = os.str();
  INFO(what);
  kernels::set_conv_algorithm_mode(mode);
  Tensor x = random_cpu(c.x, dt, seed), w = random_cpu(c.w, dt, seed + 1);
  const kernels::ConvDispatchCounts before = kernels::conv_dispatch_counts();

  Tensor y = c.transposed ? kernels::conv_transpose2d(x, w, c.p) : kernels::conv2d(x, w, c.p);
  Tensor y_gpu = c.transposed ? kernels::conv_transpose2d(on_gpu(x), on_gpu(w), c.p)
                              : kernels::conv2d(on_gpu(x), on_gpu(w), c.p);
  require_close(y_gpu, y, what + ": forward");

  Tensor grad = random_cpu(y.shape(), dt, seed + 2);
  Tensor dx = c.transposed ? kernels::conv_transpose2d_backward_input(grad, w, c.x, c.p)
                           : kernels::conv2d_backward_input(grad, w, c.x, c.p);
  Tensor dx_gpu = c.transposed ? kernels::conv_transpose2d_backward_input(on_gpu(grad), on_gpu(w), c.x, c.p)
                               : kernels::conv2d_backward_input(on_gpu(grad), on_gpu(w), c.x, c.p);
  require_close(dx_gpu, dx, what + ": backward_input");

  Tensor dw = c.transposed ? kernels::conv_transpose2d_backward_weight(grad, x, c.w, c.p)
                           : kernels::conv2d_backward_weight(grad, x, c.w, c.p);
  Tensor dw_gpu = c.transposed ? kernels::conv_transpose2d_backward_weight(on_gpu(grad), on_gpu(x), c.w, c.p)
                               : kernels::conv2d_backward_weight(on_gpu(grad), on_gpu(x), c.w, c.p);
  require_close(dw_gpu, dw, what + ": backward_weight");

  const kernels::ConvDispatchCounts after = kernels::conv_dispatch_counts();
  const uint64_t by_cudnn = after.cudnn - before.cudnn, by_im2col = after.im2col - before.im2col;
  INFO("calls on cuDNN " << by_cudnn << ", on im2col " << by_im2col);
  CHECK(by_cudnn + by_im2col == 3);
  if (mode == ConvAlgorithmMode::off || !kernels::cudnn_built()) CHECK(by_cudnn == 0);
}

// conv2d weight [o, c / groups, k, k]; conv_transpose2d weight [c, o / groups, k, k].
const std::vector<Case> kCases = {
    {{2, 4, 7, 6}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}, false},
    {{2, 8, 9, 9}, {8, 1, 3, 3}, {.padding = 1, .groups = 8}, false},
    {{3, 3, 6, 7}, {6, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 3}, false},
    {{2, 2, 9, 8}, {3, 2, 3, 3}, {.padding = 2, .dilation = 2}, false},
    {{3, 4, 9, 7}, {4, 2, 3, 3}, {.stride = 2, .padding = 1, .dilation = 2, .groups = 2}, false},
    {{1, 6, 5, 7}, {9, 2, 2, 2}, {.stride = 3, .padding = 1, .dilation = 3, .groups = 3}, false},
    // StyleGAN2's modulated convolution: the batch folded into the groups.
    {{1, 4 * 3, 8, 8}, {4 * 5, 3, 3, 3}, {.padding = 1, .groups = 4}, false},
    {{2, 4, 3, 4}, {4, 3, 3, 3}, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2}, true},
    {{2, 3, 4, 3}, {3, 1, 3, 3}, {.dilation = 2, .groups = 3}, true},
    {{2, 4, 3, 3},
     {4, 1, 2, 2},
     {.stride = 2, .padding = 1, .output_padding = 1, .dilation = 2, .groups = 2},
     true},
    {{2, 2, 3, 5}, {2, 4, 3, 3}, {.padding = 1, .output_padding = 1, .dilation = 2}, true},
    {{1, 6, 3, 5},
     {6, 1, 3, 3},
     {.stride = 3, .padding = 2, .output_padding = 2, .dilation = 2, .groups = 3},
     true},
};

}  // namespace

TEST_CASE("cuda grouped and dilated convolutions match the CPU, through cuDNN and im2col") {
  ModeGuard guard;
  uint64_t seed = 900;
  for (ConvAlgorithmMode mode : {ConvAlgorithmMode::on, ConvAlgorithmMode::off})
    for (DType dt : {DType::f32, DType::f64})
      for (const Case& c : kCases) check_case(c, mode, dt, seed += 3);
}

TEST_CASE("cuda grouped conv2d runs on cuDNN when it is built") {
  if (!kernels::cudnn_built()) return;
  ModeGuard guard;
  kernels::set_conv_algorithm_mode(ConvAlgorithmMode::on);
  const Conv2dParams p{.padding = 1, .groups = 4};
  Tensor x = on_gpu(random_cpu({2, 8, 8, 8}, DType::f32, 1)),
         w = on_gpu(random_cpu({8, 2, 3, 3}, DType::f32, 2));
  const kernels::ConvDispatchCounts before = kernels::conv_dispatch_counts();
  Tensor y = kernels::conv2d(x, w, p);
  CHECK(kernels::conv_dispatch_counts().cudnn == before.cudnn + 1);
  require_close(y, kernels::conv2d(x.to(Device::cpu()), w.to(Device::cpu()), p), "grouped conv2d on cuDNN");
}
