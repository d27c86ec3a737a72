#include "autograd/ops.h"
#include "runtime/rng.h"

namespace tandem {

Variable zeros(const Shape& shape, bool requires_grad, DType dtype) {
  return Variable(Tensor::zeros(shape, dtype), requires_grad);
}

Variable ones(const Shape& shape, bool requires_grad, DType dtype) {
  return Variable(Tensor::ones(shape, dtype), requires_grad);
}

Variable randn(const Shape& shape, Generator& gen, bool requires_grad, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_normal(t, 0.0, 1.0, gen);
  return Variable(t, requires_grad);
}

Variable randn(const Shape& shape, bool requires_grad, DType dtype) {
  return randn(shape, default_generator(), requires_grad, dtype);
}

Variable tensor(const Shape& shape, const std::vector<double>& values, bool requires_grad, DType dtype) {
  return Variable(Tensor::from_values(shape, values, dtype), requires_grad);
}

}  // namespace tandem
