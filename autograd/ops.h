// Differentiable ops on Variables. Each runs its kernel and records a node (see
// function.h); gradients are those of kernels/ (each kernel's backward sits beside it).
//
// Contract: shapes follow the kernels' contracts; shape, dtype or device mismatches throw
// an Error naming the op and both shapes. Reductions return 0-d Variables.
//
// Second order (grad() with create_graph, engine.h): these ops have differentiable
// backward rules -- add, sub, mul, div (broadcasting included), sum_to, broadcast_to,
// index_select, neg, scale, add_scalar, square, sqrt, add_bias, exp, log, pow, abs, clamp,
// maximum, minimum, where, max, min, logsumexp, log_softmax, softmax, nll_loss,
// cross_entropy, dropout, sum and
// mean (all and per axis), reshape, flatten, concat, slice, permute, transpose, matmul, linear, relu,
// leaky_relu, tanh, sigmoid, softplus, bias_activation, bce_with_logits, conv2d, conv_transpose2d,
// conv2d_input_grad, conv2d_weight_grad, upsample_nearest2x, avg_pool2x, upfirdn2d and interpolate_bilinear.
// relu and leaky_relu use their local slope as a constant (zero second derivative away from the kink), as
// abs, clamp, maximum, minimum and where use their masks. The rules are built from ops that have rules
// themselves, so every order is exact (conv2d, conv2d_input_grad and conv2d_weight_grad differentiate into
// each other, as do slice and its padding, upsample and pool, and upfirdn2d with its adjoint). batch_norm
// (training and eval) has none and throws an Error naming the op when its backward is needed under
// create_graph.
#pragma once

#include <vector>

#include "autograd/variable.h"
#include "kernels/bias_activation.h"
#include "kernels/conv.h"
#include "kernels/resample.h"

namespace tandem {

class Generator;

// Factories (leaves, no history).
Variable zeros(const Shape& shape, bool requires_grad = false, DType dtype = DType::f32);
Variable ones(const Shape& shape, bool requires_grad = false, DType dtype = DType::f32);
// Standard normal draws from `gen` (e.g. noise of its own per rank: Generator gen(seed + rank)),
// or from default_generator().
Variable randn(const Shape& shape, Generator& gen, bool requires_grad = false, DType dtype = DType::f32);
Variable randn(const Shape& shape, bool requires_grad = false, DType dtype = DType::f32);
Variable tensor(const Shape& shape, const std::vector<double>& values, bool requires_grad = false,
                DType dtype = DType::f32);

// Linear algebra.
Variable matmul(const Variable& a, const Variable& b, bool transpose_a = false, bool transpose_b = false);
// x [N, in] * weight [out, in]^T + bias [out] (bias may be undefined).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);

// Elementwise. add, sub, mul and div broadcast as NumPy does (kernels/broadcast.h): each
// operand's gradient is summed back to its shape (sum_to); equal shapes pass it on uncopied.
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
// x summed over the axes along which `shape` broadcasts to x's shape (x itself when equal),
// and x repeated to `shape`: each is the other's gradient.
Variable sum_to(const Variable& x, const Shape& shape);
Variable broadcast_to(const Variable& x, const Shape& shape);
Variable neg(const Variable& a);
Variable scale(const Variable& a, double s);
Variable add_scalar(const Variable& a, double s);
Variable square(const Variable& a);
// sqrt(x) for x >= 0. Its gradient is 1 / (2 sqrt(x)) for x > 0 and defined as 0 at x == 0
// (no epsilon), so a norm sqrt(sum(v^2)) has the subgradient 0 at v = 0 instead of NaN;
// its second-order rule keeps that convention (all derivatives are 0 where x == 0).
Variable sqrt(const Variable& x);
Variable add_bias(const Variable& x, const Variable& bias);  // bias [C] over axis 1
Variable exp(const Variable& x);
Variable log(const Variable& x);  // for x > 0 (log 0 is -inf, its gradient inf)
Variable pow(const Variable& x, double p);
// |x|; its gradient is sign(x), 0 at x == 0.
Variable abs(const Variable& x);
// min(max(x, lo), hi), lo <= hi; the gradient passes where lo <= x <= hi.
Variable clamp(const Variable& x, double lo, double hi);
// Elementwise larger / smaller of a and b, broadcasting as add; the gradient goes to the
// operand taken, split evenly between equal operands.
Variable maximum(const Variable& a, const Variable& b);
Variable minimum(const Variable& a, const Variable& b);
// a where condition is non-zero, else b; condition (a constant, a's dtype and device: e.g.
// kernels::compare's masks), a and b broadcast together. Each side's gradient is the
// incoming one where that side was chosen, 0 elsewhere.
Variable where(const Tensor& condition, const Variable& a, const Variable& b);

// Reductions.
Variable sum(const Variable& x);
Variable mean(const Variable& x);
Variable sum(const Variable& x, int64_t axis, bool keepdim = false);
Variable mean(const Variable& x, int64_t axis, bool keepdim = false);

// Activations. leaky_relu's default slope is nn::LeakyReLU's (0.01, as PyTorch's).
inline constexpr double kLeakyReluDefaultSlope = 0.01;
Variable relu(const Variable& x);
Variable leaky_relu(const Variable& x, double slope = kLeakyReluDefaultSlope);
Variable tanh(const Variable& x);
Variable sigmoid(const Variable& x);
Variable softplus(const Variable& x);
// act(x + bias[c]) in one kernel each way (kernels/bias_activation.h): the same values as
// activation(add_bias(x, bias)), bit for bit on the CPU. slope: leaky_relu's (> 0).
// StyleGAN's bias_act options: y = clamp(act(x + bias) * gain, -clamp, clamp), gain > 0,
// clamp < 0 for none (the defaults change nothing); the gradient is 0 where it clamped.
Variable bias_activation(const Variable& x, const Variable& bias, kernels::Activation act, double slope = 0.0,
                         double gain = 1.0, double clamp = kernels::kNoClamp);

// Indexing by int64 tensors (kernels/index_ops.h; out-of-range values are named errors).
// index_select: x's slices index[0..J) along dim (index 1-D); its gradient sums repeats.
// one_hot: index.shape + [classes], 1 at each class (a constant: no gradient).
Variable index_select(const Variable& x, int64_t dim, const Tensor& index);
Variable one_hot(const Tensor& index, int64_t classes, DType dtype = DType::f32);

// Along one axis (negative counts from the end).
// max/min: the largest / smallest value and its int64 position (the first on ties; NaN
// counts as the largest and the smallest); the gradient goes to that position alone.
struct AxisExtreme {
  Variable values;
  Tensor indices;
};
AxisExtreme max(const Variable& x, int64_t axis, bool keepdim = false);
AxisExtreme min(const Variable& x, int64_t axis, bool keepdim = false);
// log(sum(exp(x))), computed as m + log(sum(exp(x - m))) with m the (constant) maximum, so
// large inputs do not overflow; log_softmax = x - logsumexp(x); softmax = exp(log_softmax).
Variable logsumexp(const Variable& x, int64_t axis, bool keepdim = false);
Variable log_softmax(const Variable& x, int64_t axis);
Variable softmax(const Variable& x, int64_t axis);

// Losses. bce_with_logits is elementwise (reduce with mean()).
Variable bce_with_logits(const Variable& logits, const Variable& targets);
// Classification over scores [N, C] with int64 class targets [N] (each in [0, C), an Error
// naming the row otherwise; on a GPU the targets are read back for that check: one host wait).
enum class Reduction { mean, sum, none };  // none: one loss per row
// -log_probs[i, target[i]] per row (log_probs from log_softmax).
Variable nll_loss(const Variable& log_probs, const Tensor& target, Reduction reduction = Reduction::mean);
// nll_loss of log_softmax(logits, 1), with PyTorch's label smoothing: the target
// distribution (1 - s) one_hot + s / C.
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;  // s in [0, 1]
};
Variable cross_entropy(const Variable& logits, const Tensor& target, const CrossEntropyOptions& options = {});

// Shape.
Variable reshape(const Variable& x, const Shape& shape);
Variable flatten(const Variable& x);  // [N, ...] -> [N, prod(...)]
Variable concat(const std::vector<Variable>& parts, int64_t axis);
Variable slice(const Variable& x, int64_t axis, int64_t start, int64_t length);
// permute: axis k of the result is x's axis dims[k] (dims a permutation of x's axes, negative
// counting from the end; at most 8 axes), a new contiguous tensor; transpose swaps two axes
// (a permute). The gradient is the inverse permutation, itself a permute, so every order is
// exact. Repeated or out-of-range dims are an Error naming the op, the dims and the shape.
Variable permute(const Variable& x, const std::vector<int64_t>& dims);
Variable transpose(const Variable& x, int64_t dim0, int64_t dim1);

// Dropout over the global batch (runtime/global_draws.h): x [B, ...] is rank `rank`'s rows of
// a global batch split evenly over `world` ranks; in training mode x times
// dropout_mask_global_rows(x.shape(), p, seed, iteration, rank, world) (each element zeroed
// with probability p, the rest scaled by 1 / (1 - p)), so N ranks drop exactly what one
// process drops from the whole batch; in eval mode (or p = 0) x itself. seed is the stream
// key of this dropout (a purpose mixed in); the gradient is the same mask.
Variable dropout(const Variable& x, double p, bool training, uint64_t seed, int64_t iteration, int rank = 0,
                 int world = 1);

// Convolution, normalisation, resampling (NCHW).
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias,
                const kernels::Conv2dParams& p);
Variable conv_transpose2d(const Variable& x, const Variable& weight, const Variable& bias,
                          const kernels::Conv2dParams& p);
// The gradients of conv2d(x, weight, p) [no bias] for x and for weight, given the output
// gradient `grad`, as ops of their own (the second-order rules of the convolutions use them).
// x_shape and weight_shape fix the shape of the result; p.output_padding must be 0.
Variable conv2d_input_grad(const Variable& grad, const Variable& weight, const Shape& x_shape,
                           const kernels::Conv2dParams& p);
Variable conv2d_weight_grad(const Variable& grad, const Variable& x, const Shape& weight_shape,
                            const kernels::Conv2dParams& p);
// batch_norm: x [N, C], [N, C, L] or [N, C, H, W]; gamma and beta may be undefined.
// Training mode normalises with the batch statistics and updates running_mean/running_var
// (buffers) in place when they are defined; eval mode uses them.
Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Variable upsample_nearest2x(const Variable& x);
Variable avg_pool2x(const Variable& x);
// StyleGAN2's upfirdn2d (kernels/resample.h): upsample by zero insertion, pad or crop,
// convolve with the constant `filter` (no gradient for it), downsample. Its gradient is
// upfirdn2d again (up and down swapped, the filter flipped), so every order is exact.
Variable upfirdn2d(const Variable& x, const Tensor& filter, const kernels::UpFirDn2dParams& p);
// StyleGAN2's resampling helpers around upfirdn2d, with its padding formulas: for a filter
// of fh x fw taps (1-D filters count as k x k) the outputs are [up H, up W] (upsample2d,
// the filter scaled by up^2 so a constant image keeps its level), [H / down, W / down] for
// H, W divisible by down (downsample2d), [H, W] (filter2d); `padding` adds to each side.
struct Padding2d {
  int64_t x0 = 0, x1 = 0, y0 = 0, y1 = 0;
};
Variable upsample2d(const Variable& x, const Tensor& filter, int64_t up = 2, const Padding2d& padding = {});
Variable downsample2d(const Variable& x, const Tensor& filter, int64_t down = 2,
                      const Padding2d& padding = {});
Variable filter2d(const Variable& x, const Tensor& filter, const Padding2d& padding = {});
// StyleGAN2's setup_filter: the outer product of `taps` with itself, normalised to sum 1
// ([1, 3, 3, 1] gives the 4 x 4 binomial blur), as a [k, k] constant of dtype on device.
Tensor setup_filter(const std::vector<double>& taps, DType dtype = DType::f32, Device device = Device::cpu());
// The same filter in its separable form: `taps` normalised to sum 1, a [k] constant, which
// upfirdn2d takes as its outer product with itself and runs as two 1-D passes (on the CPU,
// vectorised: several times faster than the [k, k] form).
Tensor setup_separable_filter(const std::vector<double>& taps, DType dtype = DType::f32,
                              Device device = Device::cpu());
// Bilinear resizing with PyTorch's F.interpolate(mode='bilinear', align_corners=False)
// semantics, no antialias (kernels/bilinear.h): x [N, C, H, W] -> [N, C, out_h, out_w]. Its
// gradient is the map's adjoint, whose gradient is the map again: every order is exact.
Variable interpolate_bilinear(const Variable& x, int64_t out_h, int64_t out_w);

// Operators.
inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
inline Variable operator-(const Variable& a) { return neg(a); }
inline Variable operator*(double s, const Variable& a) { return scale(a, s); }
inline Variable operator*(const Variable& a, double s) { return scale(a, s); }
inline Variable operator+(const Variable& a, double s) { return add_scalar(a, s); }
inline Variable operator-(const Variable& a, double s) { return add_scalar(a, -s); }

}  // namespace tandem
