// The compute precision (autograd/precision.h, Module::set_compute_dtype): ops round their
// operands where they read them, forward, backward and second order alike, under the dtype
// in force when they ran forward; modules run their GEMMs and convolutions in theirs.
// The references are the kernels on operands rounded by hand (the same kernels, so bitwise).
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>

#include "autograd/grad.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/precision.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/non_finite.h"
#include "kernels/norm.h"
#include "runtime/rng.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_f32(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

Tensor rounded(const Tensor& t, DType dtype) { return t.to(dtype); }

}  // namespace

TEST_CASE("PrecisionScope sets the thread's compute dtype and restores it", "[precision]") {
  CHECK(compute_dtype() == DType::f32);
  {
    PrecisionScope outer(DType::bf16);
    CHECK(compute_dtype() == DType::bf16);
    {
      PrecisionScope inner(DType::f16);
      CHECK(compute_dtype() == DType::f16);
    }
    CHECK(compute_dtype() == DType::bf16);
  }
  CHECK(compute_dtype() == DType::f32);
  CHECK_THROWS_WITH(PrecisionScope(DType::f64), Catch::Contains("compute dtype float64 is not one"));
  // float64 operands (gradient checks) are never rounded; float32 ones are.
  const Tensor d = Tensor::from_values({1}, {1.0 / 3.0}, DType::f64);
  CHECK(compute_operand(d, DType::bf16).dtype() == DType::f64);
  CHECK(compute_operand(d.to(DType::f32), DType::bf16).dtype() == DType::bf16);
  CHECK(compute_operand(d.to(DType::f32), DType::f32).dtype() == DType::f32);
}

TEST_CASE("matmul under bfloat16 and float16 reads rounded operands, forward and backward", "[precision]") {
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(dtype_name(dtype));
    const Tensor a0 = random_f32({5, 40}, 1), b0 = random_f32({40, 3}, 2), r = random_f32({5, 3}, 3);
    Variable a(a0.clone(), true), b(b0.clone(), true);
    Variable y;
    {
      PrecisionScope scope(dtype);
      y = matmul(a, b);
    }
    // Forward: the kernel on the rounded operands, float32 out.
    REQUIRE(y.data().dtype() == DType::f32);
    CHECK(bitwise_equal(y.data(), kernels::matmul(rounded(a0, dtype), rounded(b0, dtype))));
    CHECK_FALSE(bitwise_equal(y.data(), kernels::matmul(a0, b0)));
    // Backward, run outside the scope: still the op's dtype, on the rounded gradient too.
    sum(mul(y, Variable(r))).backward();
    const Tensor g = rounded(r, dtype);
    CHECK(bitwise_equal(a.grad(), kernels::matmul(g, rounded(b0, dtype), false, true)));
    CHECK(bitwise_equal(b.grad(), kernels::matmul(rounded(a0, dtype), g, true, false)));
    // Second order (create_graph) runs under the op's dtype as well.
    Variable a2(a0.clone(), true), b2(b0.clone(), true);
    Variable y2;
    {
      PrecisionScope scope(dtype);
      y2 = matmul(a2, b2);
    }
    const std::vector<Variable> first =
        grad({sum(mul(y2, Variable(r)))}, {a2}, {}, GradOptions{.create_graph = true});
    CHECK(bitwise_equal(first[0].data(), a.grad()));
  }
}

TEST_CASE("convolutions under float16 read rounded operands, forward and backward", "[precision]") {
  const kernels::Conv2dParams p{.stride = 1, .padding = 1};
  const Tensor x0 = random_f32({2, 4, 6, 6}, 4), w0 = random_f32({3, 4, 3, 3}, 5);
  const Tensor r = random_f32({2, 3, 6, 6}, 6);
  Variable x(x0.clone(), true), w(w0.clone(), true);
  Variable y;
  {
    PrecisionScope scope(DType::f16);
    y = conv2d(x, w, Variable(), p);
  }
  const Tensor x16 = rounded(x0, DType::f16), w16 = rounded(w0, DType::f16), g16 = rounded(r, DType::f16);
  CHECK(bitwise_equal(y.data(), kernels::conv2d(x16, w16, p)));
  sum(mul(y, Variable(r))).backward();
  CHECK(bitwise_equal(x.grad(), kernels::conv2d_backward_input(g16, w16, x0.shape(), p)));
  CHECK(bitwise_equal(w.grad(), kernels::conv2d_backward_weight(g16, x16, w0.shape(), p)));
  // conv_transpose2d likewise.
  const Tensor wt0 = random_f32({4, 2, 4, 4}, 7);
  const kernels::Conv2dParams tp{.stride = 2, .padding = 1};
  Variable xt(x0.clone(), true), wt(wt0.clone(), true);
  Variable yt;
  {
    PrecisionScope scope(DType::bf16);
    yt = conv_transpose2d(xt, wt, Variable(), tp);
  }
  const Tensor wt16 = rounded(wt0, DType::bf16), xb = rounded(x0, DType::bf16);
  CHECK(bitwise_equal(yt.data(), kernels::conv_transpose2d(xb, wt16, tp)));
  const Tensor rt = random_f32(yt.shape(), 8);
  sum(mul(yt, Variable(rt))).backward();
  const Tensor gt = rounded(rt, DType::bf16);
  CHECK(bitwise_equal(xt.grad(), kernels::conv_transpose2d_backward_input(gt, wt16, x0.shape(), tp)));
  CHECK(bitwise_equal(wt.grad(), kernels::conv_transpose2d_backward_weight(gt, xb, wt0.shape(), tp)));
}

// precision.h: what an op keeps for backward is its operands rounded to the compute dtype,
// so a float32 activation that nothing else holds is freed once the op has run forward;
// under float32 the op keeps the activation itself. The gradients are those of the rounded
// operands either way.
TEST_CASE("GEMMs and convolutions keep their operands for backward in the compute dtype", "[precision]") {
  const kernels::Conv2dParams p{.stride = 2, .padding = 1};
  const Tensor x0 = random_f32({2, 3, 8, 8}, 11), w0 = random_f32({4, 3, 4, 4}, 12);
  const Tensor a0 = random_f32({5, 6}, 13), b0 = random_f32({6, 7}, 14);
  for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(compute));
    Variable x(x0.clone(), true), w(w0.clone(), true), a(a0.clone(), true), b(b0.clone(), true);
    std::weak_ptr<Storage> conv_input, matmul_input;
    Variable y, c;
    {
      PrecisionScope scope(compute);
      Variable h = scale(x, 2.0), e = scale(a, 2.0);  // activations whose own backward keeps nothing
      conv_input = h.data().storage();
      matmul_input = e.data().storage();
      y = conv2d(h, w, Variable(), p);
      c = matmul(e, b);
    }
    CHECK(conv_input.expired() == (compute != DType::f32));
    CHECK(matmul_input.expired() == (compute != DType::f32));
    sum(y).backward();
    sum(c).backward();
    // x.grad = 2 conv2d_backward_input(ones, w), w.grad = conv2d_backward_weight(ones, 2 x), all
    // in the compute dtype (2 x rounds as x does: a power of two).
    const Tensor ones_y = Tensor::ones(y.shape(), compute), wr = w0.to(compute);
    const Tensor hr = kernels::scale(x0, 2.0).to(compute);
    const Tensor gx = kernels::conv2d_backward_input(ones_y, wr, x0.shape(), p);
    CHECK(bitwise_equal(x.grad(), kernels::scale(gx, 2.0)));
    CHECK(bitwise_equal(w.grad(), kernels::conv2d_backward_weight(ones_y, hr, w0.shape(), p)));
    const Tensor ones_c = Tensor::ones(c.shape(), compute), er = kernels::scale(a0, 2.0).to(compute);
    CHECK(bitwise_equal(a.grad(), kernels::scale(kernels::matmul(ones_c, b0.to(compute), false, true), 2.0)));
    CHECK(bitwise_equal(b.grad(), kernels::matmul(er, ones_c, true, false)));
  }
}

// nn.h: under bfloat16 BatchNorm reads its input rounded, so what it keeps for backward is
// 16-bit and a float32 activation that only fed it is freed after the forward; its output,
// gradients and running statistics are those of the float32 kernels on the rounded input,
// bitwise. float32 and float16 read the input as it is and keep it.
TEST_CASE("BatchNorm reads its input rounded under bfloat16 and keeps it 16-bit", "[precision]") {
  const Tensor x0 = random_f32({3, 4, 5, 5}, 21), r0 = random_f32({3, 4, 5, 5}, 22);
  for (DType compute : {DType::f32, DType::bf16, DType::f16}) {
    INFO(dtype_name(compute));
    nn::BatchNorm2d bn(4);
    bn.set_compute_dtype(compute);
    Variable x(x0.clone(), true);
    std::weak_ptr<Storage> input;
    Variable y;
    {
      Variable h = scale(x, 2.0);  // an activation whose own backward keeps nothing
      input = h.data().storage();
      y = bn.forward(h);
    }
    CHECK(input.expired() == (compute == DType::bf16));
    sum(mul(y, Variable(r0))).backward();
    // By hand: the float32 kernels on the input bn read (2 x rounds as x does).
    const Tensor h = compute == DType::bf16 ? rounded(kernels::scale(x0, 2.0), DType::bf16).to(DType::f32)
                                            : kernels::scale(x0, 2.0);
    Tensor mean = Tensor::zeros({4}), var = Tensor::ones({4});
    kernels::BatchNormSaved saved;
    const Tensor want_y =
        kernels::batch_norm_train(h, Tensor::ones({4}), Tensor::zeros({4}), mean, var, 0.1, 1e-5, saved);
    const kernels::BatchNormGrads want = kernels::batch_norm_backward(r0, h, Tensor::ones({4}), saved);
    CHECK(y.data().dtype() == DType::f32);
    CHECK(bitwise_equal(y.data(), want_y));
    CHECK(bitwise_equal(x.grad(), kernels::scale(want.x, 2.0)));
    CHECK(bitwise_equal(bn.weight.grad(), want.gamma));
    CHECK(bitwise_equal(bn.bias.grad(), want.beta));
    CHECK(bitwise_equal(bn.running_mean, mean));
    CHECK(bitwise_equal(bn.running_var, var));
    bn.eval();  // eval mode reads the rounded input too
    const Tensor eval_want =
        kernels::batch_norm_eval(h, Tensor::ones({4}), Tensor::zeros({4}), mean, var, 1e-5);
    CHECK(bitwise_equal(bn.forward(Variable(kernels::scale(x0, 2.0))).data(), eval_want));
  }
}

TEST_CASE("A module's compute dtype covers its subtree; unset modules take the caller's", "[precision]") {
  Generator gen(9);
  auto first = std::make_shared<nn::Linear>(6, 8, true, gen);
  auto second = std::make_shared<nn::Linear>(8, 2, true, gen);
  auto net = std::make_shared<nn::Sequential>(first, std::make_shared<nn::ReLU>(), second);
  const Tensor x0 = random_f32({4, 6}, 10);
  const Variable x(x0);
  const Tensor fp32 = net->forward(x).data().clone();
  second->set_compute_dtype(DType::bf16);
  CHECK(first->assigned_compute_dtype() == std::nullopt);
  CHECK(second->assigned_compute_dtype() == DType::bf16);
  const Tensor mixed = net->forward(x).data();
  CHECK(compute_dtype() == DType::f32);  // the module's scope closed with its forward
  // By hand: the first layer in float32, the second on rounded operands.
  const Tensor h = relu(linear(x, first->weight, first->bias)).data();
  const Tensor want =
      add_bias(Variable(kernels::matmul(rounded(h, DType::bf16), rounded(second->weight.data(), DType::bf16),
                                        false, true)),
               second->bias)
          .data();
  CHECK(bitwise_equal(mixed, want));
  CHECK_FALSE(bitwise_equal(mixed, fp32));
  {  // an unset module takes the caller's dtype; a set one keeps its own
    PrecisionScope scope(DType::f16);
    second->set_compute_dtype(DType::f32);
    const Tensor out = net->forward(x).data();
    const Tensor h1 = first->forward(x).data();
    CHECK(bitwise_equal(
        h1, add_bias(Variable(kernels::matmul(rounded(x0, DType::f16),
                                              rounded(first->weight.data(), DType::f16), false, true)),
                     first->bias)
                .data()));
    CHECK(bitwise_equal(out, second->forward(relu(Variable(h1))).data()));
  }
  net->set_compute_dtype(DType::bf16);
  CHECK(first->assigned_compute_dtype() == DType::bf16);
  CHECK_THROWS_WITH(net->set_compute_dtype(DType::i32),
                    Catch::Contains("Sequential") && Catch::Contains("int32"));
}

TEST_CASE("A float16 gradient beyond 65504 is infinite where the op reads it: what a loss scaler sees",
          "[precision]") {
  Generator gen(11);
  nn::Linear layer(4, 3, true, gen);
  layer.set_compute_dtype(DType::f16);
  const Variable y = layer.forward(Variable(random_f32({2, 4}, 12)));
  scale(sum(y), 1e5).backward();  // a loss scale too large for float16
  CHECK_FALSE(kernels::all_finite(layer.weight.grad()));
  layer.zero_grad();
  const Variable y2 = layer.forward(Variable(random_f32({2, 4}, 12)));
  scale(sum(y2), 1e3).backward();
  CHECK(kernels::all_finite(layer.weight.grad()));
}
