#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/bias_activation.h"
#include "kernels/sign_class.h"

namespace tandem {

namespace {

using Grads = std::vector<Variable>;
using kernels::Activation;

// add_bias's gradient for the bias, as Variable ops: sum over every axis but 1.
Variable bias_grad_of(Variable g) {
  while (g.dim() > 2) g = sum(g, g.dim() - 1);
  return sum(g, 0);
}

}  // namespace

// For relu and leaky_relu without gain or clamp, what the backward keeps of y is its sign
// class (kernels/sign_class.h): y is freed unless something else holds it, as a GEMM that
// rounds it to a 16-bit compute dtype does not. The second-order rule holds x and the bias
// only where it recomputes the activation from them (tanh, sigmoid).
Variable bias_activation(const Variable& x, const Variable& bias, Activation act, double slope, double gain,
                         double clamp) {
  Tensor y = kernels::bias_activation(x.data(), bias.data(), act, slope, gain, clamp);
  const Tensor saved = kernels::sign_class_stands_for_output(act, gain, clamp) && records_graph({x, bias})
                           ? kernels::sign_class(y)
                           : y;
  const bool recomputes = act == Activation::tanh || act == Activation::sigmoid;
  const Variable x_kept = recomputes ? x : Variable(), bias_kept = recomputes ? bias : Variable();
  return make_result(
      std::move(y), "bias_activation", {x, bias},
      [saved, act, slope, gain, clamp](const Tensor& g, const FunctionNode&) {
        kernels::BiasActivationGrads grads =
            kernels::bias_activation_backward(g, saved, act, slope, gain, clamp);
        return std::vector<Tensor>{grads.x, grads.bias};
      },
      // The unfused ops' rules: relu and leaky_relu scale by their local slope (a constant
      // read from y's sign), tanh and sigmoid recompute their output from the inputs. The
      // gain and the clamp's mask are a constant factor (gain where the clamp passes, 0
      // where it acted), as clamp's mask is.
      [x_kept, bias_kept, saved, act, slope, gain, clamp](const Variable& g, const FunctionNode&) {
        // The constant factor of `a`'s backward from y (an incoming gradient of ones).
        auto factor = [&](Activation a, double s) {
          const Tensor ones = Tensor::ones(g.data().shape(), g.data().dtype(), g.data().device());
          return Variable(kernels::bias_activation_backward(ones, saved, a, s, gain, clamp).x, false);
        };
        Variable gz = g;
        if (act == Activation::relu || act == Activation::leaky_relu) {
          gz = mul(g, factor(act, slope));
        } else if (gain != 1.0 || clamp >= 0.0) {
          gz = mul(g, factor(Activation::none, 0.0));
        }
        if (act == Activation::tanh) {
          gz = mul(gz, add_scalar(neg(square(tanh(add_bias(x_kept, bias_kept)))), 1.0));  // g (1 - y^2)
        } else if (act == Activation::sigmoid) {
          Variable s = sigmoid(add_bias(x_kept, bias_kept));
          gz = mul(gz, mul(s, add_scalar(neg(s), 1.0)));  // g s (1 - s)
        }
        return Grads{gz, bias_grad_of(gz)};
      });
}

}  // namespace tandem
