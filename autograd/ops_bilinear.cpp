// Bilinear resizing: a linear map whose gradient is its adjoint (kernels/bilinear.h) and
// the adjoint's gradient the map itself, each rule calling the other op, so every order of
// gradient is exact.
#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/bilinear.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;

// interpolate_bilinear's gradient for x, as an op: grad [N, C, h, w] -> [N, C, in_h, in_w].
Variable interpolate_bilinear_adjoint(const Variable& grad, int64_t in_h, int64_t in_w) {
  const int64_t out_h = grad.size(2), out_w = grad.size(3);
  return make_result(
      kernels::interpolate_bilinear_adjoint(grad.data(), in_h, in_w), "interpolate_bilinear_adjoint", {grad},
      [out_h, out_w](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::interpolate_bilinear(g, out_h, out_w)};
      },
      [out_h, out_w](const Variable& g, const FunctionNode&) {
        return Grads{interpolate_bilinear(g, out_h, out_w)};
      });
}

}  // namespace

Variable interpolate_bilinear(const Variable& x, int64_t out_h, int64_t out_w) {
  TANDEM_CHECK(x.defined(), "interpolate_bilinear: the input is undefined");
  Tensor y = kernels::interpolate_bilinear(x.data(), out_h, out_w);
  const int64_t in_h = x.size(2), in_w = x.size(3);
  return make_result(
      y, "interpolate_bilinear", {x},
      [in_h, in_w](const Tensor& g, const FunctionNode&) {
        return std::vector<Tensor>{kernels::interpolate_bilinear_adjoint(g, in_h, in_w)};
      },
      [in_h, in_w](const Variable& g, const FunctionNode&) {
        return Grads{interpolate_bilinear_adjoint(g, in_h, in_w)};
      });
}

}  // namespace tandem
