// Convolutions through cuDNN (kernels/cuda/conv_cudnn.h) against their CPU twins: the six
// ops of kernels/conv.h in every mode of kernels/conv_algorithm.h (on: heuristics,
// benchmark: timed, off: im2col + cuBLAS), on the 28x28 DCGAN's shapes, a 64x64 DCGAN's
// (ngf = ndf = 64, 4x4 kernels, stride 2, pad 1; G's first layer 1x1 -> 4x4, stride 1,
// pad 0) and odd ones; the dispatch counters prove which path ran. Tolerance: the suite's
// (relative norm error 1e-5 in float32, 1e-12 in float64), as for the im2col path.
// And the autograd layers: the same gradients through cuDNN as through the fallback.
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "kernels/conv.h"
#include "kernels/conv_algorithm.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;
using kernels::Conv2dParams;
using kernels::ConvAlgorithmMode;

namespace {

const ConvAlgorithmMode kModes[] = {ConvAlgorithmMode::on, ConvAlgorithmMode::benchmark,
                                    ConvAlgorithmMode::off};

// Restores the mode from the environment when a test ends, pass or fail.
struct ModeGuard {
  ~ModeGuard() { kernels::reset_conv_algorithm_mode(); }
};

struct ConvCase {
  Shape x, w;
  Conv2dParams p;
  bool transposed;
};

// Forward, input gradient and weight gradient on the GPU in `mode` against the CPU; with
// the mode off none of them may run on cuDNN, and with `require_cudnn` (the DCGANs' shapes),
// in float32 with cuDNN built and the mode not off, all three must have.
void check_case(const ConvCase& c, ConvAlgorithmMode mode, DType dt, uint64_t seed, bool require_cudnn) {
  std::ostringstream os;
  os << (c.transposed ? "conv_transpose2d" : "conv2d") << " x " << shape_str(c.x) << " w " << shape_str(c.w)
     << " stride " << c.p.stride << " pad " << c.p.padding << " output_padding " << c.p.output_padding << " "
     << dtype_name(dt) << " mode " << kernels::conv_algorithm_mode_name(mode);
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
  INFO("calls on cuDNN " << by_cudnn << ", on im2col " << by_im2col
                         << " (cuDNN built: " << kernels::cudnn_built() << ")");
  CHECK(by_cudnn + by_im2col == 3);
  if (mode == ConvAlgorithmMode::off || !kernels::cudnn_built()) {
    CHECK(by_cudnn == 0);
  } else if (dt == DType::f32 && require_cudnn) {
    CHECK(by_cudnn == 3);
  }
}

void check_cases(const std::vector<ConvCase>& cases, uint64_t seed, bool require_cudnn = true) {
  ModeGuard guard;
  for (DType dt : {DType::f32, DType::f64})
    for (ConvAlgorithmMode mode : kModes)
      for (const ConvCase& c : cases) check_case(c, mode, dt, seed += 3, require_cudnn);
}

}  // namespace

TEST_CASE("cudnn convolutions on the 28x28 dcgan's shapes match the CPU in every mode") {
  const int64_t b = 8;
  check_cases(
      {// D: 1 -> 64 -> 128 channels, 28 -> 14 -> 7.
       {{b, 1, 28, 28}, {64, 1, 4, 4}, {2, 1, 0}, false},
       {{b, 64, 14, 14}, {128, 64, 4, 4}, {2, 1, 0}, false},
       // G: 128 -> 64 -> 1 channels, 7 -> 14 -> 28.
       {{b, 128, 7, 7}, {128, 64, 4, 4}, {2, 1, 0}, true},
       {{b, 64, 14, 14}, {64, 1, 4, 4}, {2, 1, 0}, true}},
      5000);
}

TEST_CASE("cudnn convolutions on a 64x64 dcgan's shapes match the CPU in every mode") {
  const int64_t b = 2, nz = 100, nc = 3;
  check_cases(
      {// G: nz x 1 x 1 -> 512 x 4 x 4 (stride 1, pad 0) -> 256 x 8 x 8 -> ... -> nc x 64 x 64.
       {{b, nz, 1, 1}, {nz, 512, 4, 4}, {1, 0, 0}, true},
       {{b, 512, 4, 4}, {512, 256, 4, 4}, {2, 1, 0}, true},
       {{b, 256, 8, 8}, {256, 128, 4, 4}, {2, 1, 0}, true},
       {{b, 128, 16, 16}, {128, 64, 4, 4}, {2, 1, 0}, true},
       {{b, 64, 32, 32}, {64, nc, 4, 4}, {2, 1, 0}, true},
       // D: nc x 64 x 64 -> 64 x 32 x 32 -> ... -> 512 x 4 x 4 -> 1 x 1 x 1 (stride 1, pad 0).
       {{b, nc, 64, 64}, {64, nc, 4, 4}, {2, 1, 0}, false},
       {{b, 64, 32, 32}, {128, 64, 4, 4}, {2, 1, 0}, false},
       {{b, 128, 16, 16}, {256, 128, 4, 4}, {2, 1, 0}, false},
       {{b, 256, 8, 8}, {512, 256, 4, 4}, {2, 1, 0}, false},
       {{b, 512, 4, 4}, {1, 512, 4, 4}, {1, 0, 0}, false}},
      6000);
}

TEST_CASE("cudnn convolutions on odd shapes and output padding match the CPU in every mode") {
  check_cases({{{3, 5, 9, 7}, {4, 5, 3, 2}, {1, 0, 0}, false},
               {{2, 3, 11, 10}, {5, 3, 2, 3}, {3, 2, 0}, false},
               {{1, 2, 5, 5}, {3, 2, 5, 5}, {1, 2, 0}, false},
               {{4, 16, 7, 7}, {16, 8, 3, 3}, {2, 1, 1}, true},
               {{2, 3, 5, 4}, {3, 4, 3, 2}, {3, 1, 2}, true},
               {{3, 2, 6, 6}, {2, 5, 1, 1}, {1, 0, 0}, true}},
              7000, false);  // cuDNN may decline some (padding as large as the kernel): either path
}

TEST_CASE("cudnn convolutions with an empty batch fall back and match the CPU") {
  ModeGuard guard;
  kernels::set_conv_algorithm_mode(ConvAlgorithmMode::on);
  const kernels::ConvDispatchCounts before = kernels::conv_dispatch_counts();
  Tensor x = Tensor::zeros({0, 2, 6, 6}, DType::f32), w = random_cpu({3, 2, 3, 3}, DType::f32, 8000);
  Tensor y = kernels::conv2d(on_gpu(x), on_gpu(w), {1, 1, 0});
  CHECK(y.shape() == Shape{0, 3, 6, 6});
  Tensor dw =
      kernels::conv2d_backward_weight(on_gpu(Tensor::zeros({0, 3, 6, 6})), on_gpu(x), w.shape(), {1, 1, 0});
  require_close(dw, Tensor::zeros(w.shape()), "weight gradient of an empty batch");
  CHECK(kernels::conv_dispatch_counts().cudnn == before.cudnn);  // cuDNN takes no empty dimension
}

namespace {

// A DCGAN-like chain of autograd layers: Conv2d k4 s2 p1, LeakyReLU, ConvTranspose2d k4 s2
// p1, Tanh; the gradients of sum(y * r) for the input and every parameter.
std::vector<Tensor> layer_gradients(ConvAlgorithmMode mode) {
  kernels::set_conv_algorithm_mode(mode);
  Generator gen(42);
  nn::Conv2d conv(3, 16, 4, 2, 1, true, gen);
  nn::ConvTranspose2d deconv(16, 3, 4, 2, 1, 0, true, gen);
  conv.to(Device::cuda());
  deconv.to(Device::cuda());
  Variable x(on_gpu(random_cpu({4, 3, 16, 16}, DType::f32, 43)), true);
  Variable r(on_gpu(random_cpu({4, 3, 16, 16}, DType::f32, 44)), false);
  Variable y = tanh(deconv.forward(leaky_relu(conv.forward(x), 0.2)));
  sum(mul(y, r)).backward();
  return {x.grad(), conv.weight.grad(), conv.bias.grad(), deconv.weight.grad(), deconv.bias.grad()};
}

}  // namespace

TEST_CASE("cudnn: the autograd conv layers give the fallback's gradients") {
  ModeGuard guard;
  const kernels::ConvDispatchCounts before = kernels::conv_dispatch_counts();
  std::vector<Tensor> by_cudnn = layer_gradients(ConvAlgorithmMode::on);
  if (kernels::cudnn_built())
    CHECK(kernels::conv_dispatch_counts().cudnn - before.cudnn == 6);  // 2 forward, 4 backward
  std::vector<Tensor> by_benchmark = layer_gradients(ConvAlgorithmMode::benchmark);
  std::vector<Tensor> by_im2col = layer_gradients(ConvAlgorithmMode::off);
  const char* names[] = {"x", "conv.weight", "conv.bias", "deconv.weight", "deconv.bias"};
  for (size_t k = 0; k < by_im2col.size(); ++k) {
    REQUIRE(by_im2col[k].defined());
    require_close(by_cudnn[k], by_im2col[k].to(Device::cpu()), std::string("cuDNN vs im2col: ") + names[k]);
    require_close(by_benchmark[k], by_im2col[k].to(Device::cpu()),
                  std::string("benchmark vs im2col: ") + names[k]);
  }
}
