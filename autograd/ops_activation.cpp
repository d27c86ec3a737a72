#include "autograd/function.h"
#include "autograd/ops.h"
#include "kernels/activation.h"

namespace tandem {

Variable relu(const Variable& x) {
  return make_result(kernels::relu(x.data()), "relu", {x},
                     [X = x.data()](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::relu_backward(g, X)};
                     });
}

Variable leaky_relu(const Variable& x, double slope) {
  return make_result(kernels::leaky_relu(x.data(), slope), "leaky_relu", {x},
                     [X = x.data(), slope](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::leaky_relu_backward(g, X, slope)};
                     });
}

Variable tanh(const Variable& x) {
  Tensor y = kernels::tanh(x.data());
  return make_result(y, "tanh", {x}, [y](const Tensor& g, const FunctionNode&) {
    return std::vector<Tensor>{kernels::tanh_backward(g, y)};
  });
}

Variable sigmoid(const Variable& x) {
  Tensor y = kernels::sigmoid(x.data());
  return make_result(y, "sigmoid", {x}, [y](const Tensor& g, const FunctionNode&) {
    return std::vector<Tensor>{kernels::sigmoid_backward(g, y)};
  });
}

Variable softplus(const Variable& x) {
  return make_result(kernels::softplus(x.data()), "softplus", {x},
                     [X = x.data()](const Tensor& g, const FunctionNode&) {
                       return std::vector<Tensor>{kernels::softplus_backward(g, X)};
                     });
}

}  // namespace tandem
