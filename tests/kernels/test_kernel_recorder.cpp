// The kernel recorder (kernels/kernel_recorder.h) on the CPU: off by default, records each
// public convolution and GEMM once with its shapes (not the GEMMs inside a convolution),
// merges equal calls with a count, and counts FLOPs as 2 x multiply-adds.
#include <catch2/catch.hpp>

#include "kernels/conv.h"
#include "kernels/gemm.h"
#include "kernels/kernel_recorder.h"

using namespace tandem;
using namespace tandem::kernels;

TEST_CASE("the kernel recorder is off by default and records nothing then") {
  CHECK_FALSE(kernel_recording());
  Tensor x = Tensor::ones({1, 1, 4, 4}), w = Tensor::ones({1, 1, 3, 3});
  conv2d(x, w, {});
  matmul(Tensor::ones({2, 3}), Tensor::ones({3, 4}));
  start_kernel_recording();
  CHECK(kernel_recording());
  KernelRecord empty = stop_kernel_recording();
  CHECK_FALSE(kernel_recording());
  CHECK(empty.convs.empty());
  CHECK(empty.gemms.empty());
}

TEST_CASE("the kernel recorder lists each convolution and GEMM with its shapes and count") {
  Tensor x = Tensor::ones({2, 3, 8, 8}), w = Tensor::ones({5, 3, 4, 4});
  const Conv2dParams p{2, 1, 0};
  start_kernel_recording();
  Tensor y = conv2d(x, w, p);  // [2, 5, 4, 4]
  conv2d(x, w, p);
  conv2d_backward_weight(y, x, w.shape(), p);
  Tensor t = conv_transpose2d(y, Tensor::ones({5, 3, 4, 4}), p);  // back to [2, 3, 8, 8]
  matmul(Tensor::ones({6, 7}), Tensor::ones({8, 7}), false, true);
  Tensor c = Tensor::zeros({7, 8});
  gemm(Tensor::ones({6, 7}), true, Tensor::ones({6, 8}), false, c, 1.0, 1.0);
  gemm(Tensor::ones({6, 7}), true, Tensor::ones({6, 8}), false, c, 1.0, 1.0);
  KernelRecord r = stop_kernel_recording();
  conv2d(x, w, p);  // after stop: not recorded

  REQUIRE(r.convs.size() == 3);  // the im2col GEMMs inside the convolutions are not listed
  CHECK(r.convs[0].first.op == ConvOp::conv2d);
  CHECK(r.convs[0].first.a == Shape{2, 3, 8, 8});
  CHECK(r.convs[0].first.b == Shape{5, 3, 4, 4});
  CHECK(r.convs[0].first.out == Shape{2, 5, 4, 4});
  CHECK(r.convs[0].first.params.stride == 2);
  CHECK(r.convs[0].first.params.padding == 1);
  CHECK(r.convs[0].second == 2);
  CHECK(r.convs[0].first.str() == "conv2d x [2, 3, 8, 8] w [5, 3, 4, 4] -> [2, 5, 4, 4] s2 p1");
  CHECK(r.convs[1].first.op == ConvOp::conv2d_backward_weight);
  CHECK(r.convs[1].first.a == Shape{2, 5, 4, 4});
  CHECK(r.convs[1].first.b == Shape{2, 3, 8, 8});
  CHECK(r.convs[1].first.out == Shape{5, 3, 4, 4});
  CHECK(r.convs[1].second == 1);
  CHECK(r.convs[2].first.op == ConvOp::conv_transpose2d);
  CHECK(r.convs[2].first.out == t.shape());

  REQUIRE(r.gemms.size() == 2);
  CHECK(r.gemms[0].first == GemmCall{6, 8, 7, false, true, DType::f32});
  CHECK(r.gemms[0].second == 1);
  CHECK(r.gemms[0].first.str() == "gemm 6x8x7 NT");
  CHECK(r.gemms[1].first == GemmCall{7, 8, 6, true, false, DType::f32});
  CHECK(r.gemms[1].second == 2);
}

TEST_CASE("the kernel recorder's FLOPs: each pass of one geometry costs the same") {
  // The 28x28 dcgan's second D layer: [64, 64, 14, 14] -> [64, 128, 7, 7], 4x4 kernels.
  const Conv2dParams p{2, 1, 0};
  const double flops = 2.0 * 64 * 128 * 7 * 7 * 64 * 16;
  const Shape x{64, 64, 14, 14}, w{128, 64, 4, 4}, y{64, 128, 7, 7};
  CHECK(conv_call_flops({ConvOp::conv2d, x, w, y, p}) == flops);
  CHECK(conv_call_flops({ConvOp::conv2d_backward_input, y, w, x, p}) == flops);
  CHECK(conv_call_flops({ConvOp::conv2d_backward_weight, y, x, w, p}) == flops);
  // Its mirror in G: conv_transpose2d [64, 128, 7, 7] with weight [128, 64, 4, 4] -> x's shape.
  CHECK(conv_call_flops({ConvOp::conv_transpose2d, y, w, x, p}) == flops);
  CHECK(conv_call_flops({ConvOp::conv_transpose2d_backward_input, x, w, y, p}) == flops);
  CHECK(conv_call_flops({ConvOp::conv_transpose2d_backward_weight, x, y, w, p}) == flops);
  CHECK(gemm_call_flops({64, 256, 784, false, true, DType::f32}) == 2.0 * 64 * 256 * 784);
}

TEST_CASE("the kernel recorder names a grouped, dilated convolution and counts its FLOPs per group") {
  // [2, 8, 9, 9] with weight [8, 2, 3, 3], groups 4, dilation 2, padding 2 -> [2, 8, 9, 9]:
  // each output element sums 2 * 3 * 3 products (its group's channels only).
  const Conv2dParams p{.padding = 2, .dilation = 2, .groups = 4};
  const Shape x{2, 8, 9, 9}, w{8, 2, 3, 3}, y{2, 8, 9, 9};
  start_kernel_recording();
  CHECK(conv2d(Tensor::ones(x), Tensor::ones(w), p).shape() == y);
  KernelRecord r = stop_kernel_recording();
  REQUIRE(r.convs.size() == 1);
  CHECK(r.convs[0].first.str() == "conv2d x [2, 8, 9, 9] w [8, 2, 3, 3] -> [2, 8, 9, 9] s1 p2 d2 g4");
  CHECK_FALSE(r.convs[0].first ==
              ConvCall{ConvOp::conv2d, x, w, y, Conv2dParams{.padding = 2, .dilation = 2}});
  const double flops = 2.0 * 2 * 8 * 9 * 9 * 2 * 3 * 3;
  CHECK(conv_call_flops(r.convs[0].first) == flops);
  CHECK(conv_call_flops({ConvOp::conv2d_backward_weight, y, x, w, p}) == flops);
}
