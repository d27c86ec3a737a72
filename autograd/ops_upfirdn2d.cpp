// upfirdn2d and StyleGAN2's helpers around it. The op's gradient is upfirdn2d with the
// adjoint parameters (kernels/resample.h), and the rule for Variables calls the op itself,
// so the gradient of the gradient is again upfirdn2d and every order is exact (an R1
// penalty through a blurred discriminator needs the second).
#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/resample.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// Python's a // b for b > 0: StyleGAN's padding formulas floor (fw - up) / 2 = -1 for a
// 1-tap filter.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

struct Taps {
  int64_t fh = 0, fw = 0;
};

Taps taps_of(const char* op, const Tensor& filter) {
  check_defined(op, filter, "filter");
  TANDEM_CHECK(filter.dim() == 1 || filter.dim() == 2,
               op << ": needs a 1-D [k] or 2-D [fh, fw] filter, got " << shape_str(filter.shape()));
  return {filter.size(0), filter.dim() == 1 ? filter.size(0) : filter.size(1)};
}

}  // namespace

Variable upfirdn2d(const Variable& x, const Tensor& filter, const kernels::UpFirDn2dParams& p) {
  TANDEM_CHECK(x.defined(), "upfirdn2d: the input is undefined");
  Tensor y = kernels::upfirdn2d(x.data(), filter, p);
  const kernels::UpFirDn2dParams adjoint =
      kernels::upfirdn2d_adjoint_params(p, x.shape(), filter.shape(), y.shape());
  return make_result(
      y, "upfirdn2d", {x},
      [filter, adjoint](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::upfirdn2d(g, filter, adjoint)};
      },
      [filter, adjoint](const Variable& g, const FunctionNode&) {
        return Grads{upfirdn2d(g, filter, adjoint)};
      });
}

Variable upsample2d(const Variable& x, const Tensor& filter, int64_t up, const Padding2d& padding) {
  const Taps t = taps_of("upsample2d", filter);
  TANDEM_CHECK(up >= 1, "upsample2d: up must be >= 1, got " << up);
  kernels::UpFirDn2dParams p;
  p.up_x = p.up_y = up;
  p.pad_x0 = padding.x0 + floor_div(t.fw + up - 1, 2);
  p.pad_x1 = padding.x1 + floor_div(t.fw - up, 2);
  p.pad_y0 = padding.y0 + floor_div(t.fh + up - 1, 2);
  p.pad_y1 = padding.y1 + floor_div(t.fh - up, 2);
  // The gain up^2 that keeps a constant image's level (zero insertion leaves 1 in up^2
  // samples), spread over both factors of a separable filter.
  const double gain = static_cast<double>(up * up);
  return upfirdn2d(x, kernels::scale(filter, filter.dim() == 1 ? static_cast<double>(up) : gain), p);
}

Variable downsample2d(const Variable& x, const Tensor& filter, int64_t down, const Padding2d& padding) {
  const Taps t = taps_of("downsample2d", filter);
  TANDEM_CHECK(down >= 1, "downsample2d: down must be >= 1, got " << down);
  kernels::UpFirDn2dParams p;
  p.down_x = p.down_y = down;
  p.pad_x0 = padding.x0 + floor_div(t.fw - down + 1, 2);
  p.pad_x1 = padding.x1 + floor_div(t.fw - down, 2);
  p.pad_y0 = padding.y0 + floor_div(t.fh - down + 1, 2);
  p.pad_y1 = padding.y1 + floor_div(t.fh - down, 2);
  return upfirdn2d(x, filter, p);
}

Variable filter2d(const Variable& x, const Tensor& filter, const Padding2d& padding) {
  const Taps t = taps_of("filter2d", filter);
  kernels::UpFirDn2dParams p;
  p.pad_x0 = padding.x0 + t.fw / 2;
  p.pad_x1 = padding.x1 + (t.fw - 1) / 2;
  p.pad_y0 = padding.y0 + t.fh / 2;
  p.pad_y1 = padding.y1 + (t.fh - 1) / 2;
  return upfirdn2d(x, filter, p);
}

Tensor setup_filter(const std::vector<double>& taps, DType dtype, Device device) {
  const int64_t k = static_cast<int64_t>(taps.size());
  TANDEM_CHECK(k > 0, "setup_filter: needs at least one tap");
  double total = 0;
  std::vector<double> f(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j)
      total += f[static_cast<size_t>(i * k + j)] = taps[size_t(i)] * taps[size_t(j)];
  TANDEM_CHECK(total != 0, "setup_filter: the taps' outer product sums to 0 and cannot be normalised");
  for (double& v : f) v /= total;
  return Tensor::from_values({k, k}, f, dtype).to(device);
}

Tensor setup_separable_filter(const std::vector<double>& taps, DType dtype, Device device) {
  TANDEM_CHECK(!taps.empty(), "setup_separable_filter: needs at least one tap");
  double total = 0;
  for (double t : taps) total += t;
  TANDEM_CHECK(total != 0, "setup_separable_filter: the taps sum to 0 and cannot be normalised");
  std::vector<double> f;
  for (double t : taps) f.push_back(t / total);
  return Tensor::from_values({static_cast<int64_t>(f.size())}, f, dtype).to(device);
}

}  // namespace tandem
