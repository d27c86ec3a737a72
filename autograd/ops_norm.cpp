#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"

namespace tandem {

namespace {

Tensor data_or_undefined(const Variable& v) { return v.defined() ? v.data() : Tensor(); }

}  // namespace

Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta, Tensor& running_mean,
                    Tensor& running_var, bool training, double momentum, double eps) {
  Tensor g = data_or_undefined(gamma), b = data_or_undefined(beta);
  if (training) {
    kernels::BatchNormSaved saved;
    Tensor y = kernels::batch_norm_train(x.data(), g, b, running_mean, running_var, momentum, eps, saved);
    return make_result(y, "batch_norm", {x, gamma, beta},
                       [X = x.data(), G = g, saved](const Tensor& grad, const FunctionNode&) {
                         kernels::BatchNormGrads d = kernels::batch_norm_backward(grad, X, G, saved);
                         return std::vector<Tensor>{d.x, d.gamma, d.beta};
                       });
  }
  // Eval mode is a fixed per-channel affine map y = xhat * gamma + beta with
  // xhat = (x - running_mean) / sqrt(running_var + eps). Its gradients reuse the forward
  // kernel: dx = batch_norm_eval(grad) with zero mean and no shift is grad * gamma / std.
  // The running statistics are copied: a training step before this backward must not
  // change the map it differentiates.
  TANDEM_CHECK(running_mean.defined() && running_var.defined(),
               "batch_norm: eval mode needs running_mean and running_var, got undefined buffers for input "
                   << shape_str(x.shape()));
  Tensor mean = running_mean.clone(), var = running_var.clone();
  Tensor y = kernels::batch_norm_eval(x.data(), g, b, mean, var, eps);
  return make_result(y, "batch_norm_eval", {x, gamma, beta},
                     [X = x.data(), G = g, mean, var, eps](const Tensor& grad, const FunctionNode& node) {
                       Tensor gx, gg, gb;
                       if (node.needs_input_grad(0)) {
                         gx = kernels::batch_norm_eval(
                             grad, G, Tensor(), Tensor::zeros(mean.shape(), mean.dtype(), mean.device()), var,
                             eps);
                       }
                       if (node.needs_input_grad(1)) {
                         Tensor xhat = kernels::batch_norm_eval(X, Tensor(), Tensor(), mean, var, eps);
                         gg = kernels::bias_grad(kernels::mul(grad, xhat));
                       }
                       if (node.needs_input_grad(2)) gb = kernels::bias_grad(grad);
                       return std::vector<Tensor>{gx, gg, gb};
                     });
}

}  // namespace tandem
