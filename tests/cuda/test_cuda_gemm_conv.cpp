// cuBLAS GEMM and the im2col/col2im convolution against their CPU twins, float32 and
// float64: every transpose pair, alpha/beta, odd and empty shapes, the GAN's shapes, a
// DCGAN's conv and transposed-conv shapes (with output_padding), both column-buffer paths.
#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;
using kernels::Conv2dParams;

namespace {

const DType kFloatTypes[] = {DType::f32, DType::f64};

struct GemmCase {
  int64_t m, k, n;
};

// op(A) is m x k and op(B) is k x n: the stored shapes follow the transposes.
void check_gemm(const GemmCase& s, bool ta, bool tb, double alpha, double beta, DType dt, uint64_t seed) {
  Tensor a = random_cpu(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, dt, seed);
  Tensor b = random_cpu(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, dt, seed + 1);
  Tensor c = random_cpu({s.m, s.n}, dt, seed + 2);
  Tensor c_gpu =
      beta == 0.0 ? Tensor::empty({s.m, s.n}, dt, Device::cuda()) : on_gpu(c);  // poisoned when unread
  kernels::gemm(a, ta, b, tb, c, alpha, beta);
  kernels::gemm(on_gpu(a), ta, on_gpu(b), tb, c_gpu, alpha, beta);
  std::ostringstream what;
  what << "gemm " << s.m << "x" << s.k << "x" << s.n << (ta ? " A^T" : "") << (tb ? " B^T" : "") << " alpha "
       << alpha << " beta " << beta;
  require_close(c_gpu, c, what.str());
}

Tensor require_conv_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  require_close(gpu, cpu, what);
  return gpu;
}

// Forward, input gradient and weight gradient of conv2d (transposed = false) or
// conv_transpose2d, GPU against CPU.
void check_conv(const Shape& x_shape, const Shape& w_shape, const Conv2dParams& p, bool transposed, DType dt,
                uint64_t seed) {
  std::ostringstream os;
  os << (transposed ? "conv_transpose2d" : "conv2d") << " x " << shape_str(x_shape) << " w "
     << shape_str(w_shape) << " stride " << p.stride << " pad " << p.padding << " output_padding "
     << p.output_padding << " " << dtype_name(dt);
  const std::string what = os.str();
  Tensor x = random_cpu(x_shape, dt, seed), w = random_cpu(w_shape, dt, seed + 1);
  Tensor y = transposed ? kernels::conv_transpose2d(x, w, p) : kernels::conv2d(x, w, p);
  Tensor y_gpu = transposed ? kernels::conv_transpose2d(on_gpu(x), on_gpu(w), p)
                            : kernels::conv2d(on_gpu(x), on_gpu(w), p);
  require_conv_close(y_gpu, y, what + ": forward");

  Tensor grad = random_cpu(y.shape(), dt, seed + 2);
  Tensor dx = transposed ? kernels::conv_transpose2d_backward_input(grad, w, x_shape, p)
                         : kernels::conv2d_backward_input(grad, w, x_shape, p);
  Tensor dx_gpu = transposed ? kernels::conv_transpose2d_backward_input(on_gpu(grad), on_gpu(w), x_shape, p)
                             : kernels::conv2d_backward_input(on_gpu(grad), on_gpu(w), x_shape, p);
  require_conv_close(dx_gpu, dx, what + ": backward_input");

  Tensor dw = transposed ? kernels::conv_transpose2d_backward_weight(grad, x, w_shape, p)
                         : kernels::conv2d_backward_weight(grad, x, w_shape, p);
  Tensor dw_gpu = transposed ? kernels::conv_transpose2d_backward_weight(on_gpu(grad), on_gpu(x), w_shape, p)
                             : kernels::conv2d_backward_weight(on_gpu(grad), on_gpu(x), w_shape, p);
  require_conv_close(dw_gpu, dw, what + ": backward_weight");
}

}  // namespace

TEST_CASE("cuda gemm matches the CPU for every transpose pair, alpha and beta") {
  const GemmCase cases[] = {{1, 1, 1}, {3, 5, 7}, {17, 1, 33}, {33, 65, 9}, {64, 784, 256}};
  uint64_t seed = 100;
  for (DType dt : kFloatTypes)
    for (const GemmCase& s : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          check_gemm(s, ta, tb, 1.0, 0.0, dt, seed += 3);
          check_gemm(s, ta, tb, -0.75, 0.5, dt, seed += 3);
        }
}

// Reduced precision (gemm.h): bfloat16 and float16 pairs through cuBLAS's GemmEx (tensor
// cores, float32 accumulation), against the CPU's product of the same 16-bit values.
// Products of two 16-bit values are exact in float32, so the two differ by the order of
// their float32 sums only.
TEST_CASE("cuda gemm on bfloat16 and float16 pairs equals the CPU's, with a float32 C",
          "[reduced-precision]") {
  const GemmCase cases[] = {{3, 5, 7}, {33, 65, 9}, {64, 784, 256}, {256, 64, 784}};
  uint64_t seed = 300;
  for (DType dt : {DType::bf16, DType::f16})
    for (const GemmCase& s : cases)
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          Tensor a = random_cpu(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, dt, seed += 3);
          Tensor b = random_cpu(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, dt, seed += 3);
          Tensor c = kernels::matmul(a, b, ta, tb);
          Tensor c_gpu = kernels::matmul(on_gpu(a), on_gpu(b), ta, tb);
          REQUIRE(c_gpu.dtype() == DType::f32);
          std::ostringstream what;
          what << dtype_name(dt) << " gemm " << s.m << "x" << s.k << "x" << s.n << (ta ? " A^T" : "")
               << (tb ? " B^T" : "");
          require_close(c_gpu, c, what.str());
        }
}

TEST_CASE("cuda gemm on the MLP GAN's shapes") {
  uint64_t seed = 500;
  // Forward x W^T, the weight gradient g^T x and the input gradient g W of each layer.
  for (DType dt : kFloatTypes) {
    check_gemm({64, 784, 256}, false, true, 1.0, 0.0, dt, seed += 3);
    check_gemm({64, 256, 784}, false, true, 1.0, 0.0, dt, seed += 3);
    check_gemm({256, 64, 784}, true, false, 1.0, 0.0, dt, seed += 3);
    check_gemm({256, 64, 784}, true, false, 1.0, 1.0, dt, seed += 3);  // gradient accumulation
    check_gemm({64, 256, 784}, false, false, 1.0, 0.0, dt, seed += 3);
    check_gemm({64, 256, 256}, false, true, 1.0, 0.0, dt, seed += 3);
  }
}

TEST_CASE("cuda gemm with an empty inner dimension scales C by beta") {
  for (DType dt : kFloatTypes) {
    Tensor a = Tensor::empty({3, 0}, dt, Device::cuda()), b = Tensor::empty({0, 4}, dt, Device::cuda());
    Tensor c = random_cpu({3, 4}, dt, 7);
    Tensor c_gpu = on_gpu(c);
    kernels::gemm(a, false, b, false, c_gpu, 1.0, 0.5);
    kernels::gemm(a.to(Device::cpu()), false, b.to(Device::cpu()), false, c, 1.0, 0.5);
    require_close(c_gpu, c, "gemm 3x0x4 beta 0.5");
    Tensor z = kernels::matmul(a, b);
    require_close(z, Tensor::zeros({3, 4}, dt), "matmul 3x0x4");
  }
}

TEST_CASE("cuda matmul keeps the named shape errors") {
  Tensor a = Tensor::zeros({3, 4}, DType::f32, Device::cuda()),
         b = Tensor::zeros({5, 6}, DType::f32, Device::cuda());
  CHECK_THROWS_WITH(kernels::matmul(a, b),
                    Catch::Contains("matmul") && Catch::Contains("[3, 4]") && Catch::Contains("[5, 6]"));
  Tensor c = Tensor::zeros({3, 5}, DType::f32, Device::cuda());
  Tensor d = Tensor::zeros({4, 6}, DType::f32, Device::cuda());
  CHECK_THROWS_WITH(kernels::gemm(a, false, d, false, c), Catch::Contains("output [3, 5] should be [3, 6]"));
  Tensor cpu = Tensor::zeros({4, 6});
  CHECK_THROWS_WITH(kernels::matmul(a, cpu), Catch::Contains("matmul"));
}

TEST_CASE("cuda conv2d and its gradients match the CPU") {
  uint64_t seed = 1000;
  for (DType dt : kFloatTypes) {
    // A DCGAN discriminator on 28x28: 1 -> 64 -> 128 channels, 4x4 kernels, stride 2, pad 1.
    check_conv({8, 1, 28, 28}, {64, 1, 4, 4}, {2, 1, 0}, false, dt, seed += 3);
    check_conv({8, 64, 14, 14}, {128, 64, 4, 4}, {2, 1, 0}, false, dt, seed += 3);
    // Odd shapes: non-square kernels and inputs, stride larger than the kernel, big padding.
    check_conv({3, 5, 9, 7}, {4, 5, 3, 2}, {1, 0, 0}, false, dt, seed += 3);
    check_conv({2, 3, 11, 10}, {5, 3, 2, 3}, {3, 2, 0}, false, dt, seed += 3);
    check_conv({1, 2, 5, 5}, {3, 2, 5, 5}, {1, 2, 0}, false, dt, seed += 3);
  }
}

TEST_CASE("cuda conv_transpose2d and its gradients match the CPU") {
  uint64_t seed = 2000;
  for (DType dt : kFloatTypes) {
    // A DCGAN generator up to 28x28: 7 -> 14 -> 28, 4x4 kernels, stride 2, pad 1.
    check_conv({8, 128, 7, 7}, {128, 64, 4, 4}, {2, 1, 0}, true, dt, seed += 3);
    check_conv({8, 64, 14, 14}, {64, 1, 4, 4}, {2, 1, 0}, true, dt, seed += 3);
    // output_padding: 7 -> 14 with a 3x3 kernel, and odd shapes.
    check_conv({4, 16, 7, 7}, {16, 8, 3, 3}, {2, 1, 1}, true, dt, seed += 3);
    check_conv({2, 3, 5, 4}, {3, 4, 3, 2}, {3, 1, 2}, true, dt, seed += 3);
    check_conv({3, 2, 6, 6}, {2, 5, 1, 1}, {1, 0, 0}, true, dt, seed += 3);
  }
}

TEST_CASE("cuda conv with one sample per column buffer (no row permutation)") {
  // K L = 1152 * 16384 exceeds the GPU's column buffer, so each sample is its own GEMM.
  check_conv({2, 128, 128, 128}, {4, 128, 3, 3}, {1, 1, 0}, false, DType::f32, 3000);
}

// Reduced precision (conv.h): bfloat16 and float16 operand pairs run im2col + cuBLAS's
// 16-bit GEMMs with a float32 result, against the CPU's convolution of the same 16-bit values
// (oneDNN's bfloat16, or float32 kernels on widened operands). Every product of two 16-bit
// values is exact in float32, so the two differ by the order of their float32 sums only: the
// float32 tolerance holds. Both column-buffer paths, a transposed convolution and groups.
TEST_CASE("cuda conv2d and conv_transpose2d on bfloat16 and float16 pairs equal the CPU's, in float32",
          "[reduced-precision]") {
  uint64_t seed = 4000;
  for (DType dt : {DType::bf16, DType::f16}) {
    check_conv({8, 64, 14, 14}, {128, 64, 4, 4}, {2, 1, 0}, false, dt, seed += 3);
    check_conv({8, 128, 7, 7}, {128, 64, 4, 4}, {2, 1, 0}, true, dt, seed += 3);
    check_conv({4, 16, 7, 7}, {16, 8, 3, 3}, {2, 1, 1}, true, dt, seed += 3);
    check_conv({3, 8, 9, 7}, {6, 4, 3, 2}, {1, 1, 0, 1, 2}, false, dt, seed += 3);    // two groups
    check_conv({2, 128, 128, 128}, {4, 128, 3, 3}, {1, 1, 0}, false, dt, seed += 3);  // a sample per buffer
  }
}

TEST_CASE("cuda conv keeps the named shape errors") {
  Tensor x = Tensor::zeros({1, 3, 8, 8}, DType::f32, Device::cuda());
  Tensor w = Tensor::zeros({4, 2, 3, 3}, DType::f32, Device::cuda());
  CHECK_THROWS_WITH(kernels::conv2d(x, w, {}), Catch::Contains("conv2d") && Catch::Contains("[1, 3, 8, 8]") &&
                                                   Catch::Contains("[4, 2, 3, 3]"));
  Tensor w_cpu = Tensor::zeros({4, 3, 3, 3});
  CHECK_THROWS_WITH(kernels::conv2d(x, w_cpu, {}), Catch::Contains("conv2d"));
}
