#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "runtime/rng.h"

namespace tandem {

namespace {

// sum(output * weights) computed on plain tensors: the scalar whose gradient is checked.
double weighted_sum(const Tensor& out, const Tensor& weights) {
  const double* o = out.data<double>();
  const double* w = weights.data<double>();
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += o[i] * w[i];
  return s;
}

}  // namespace

Variable random_input(const Shape& shape, uint64_t seed, double stddev) {
  Tensor t = Tensor::empty(shape, DType::f64);
  Generator gen(seed);
  fill_normal(t, 0.0, stddev, gen);
  return Variable(t, true);
}

GradcheckResult gradcheck(const std::function<Variable(const std::vector<Variable>&)>& fn,
                          const std::vector<Variable>& inputs, double eps) {
  for (const auto& in : inputs) {
    TANDEM_CHECK(in.dtype() == DType::f64, "gradcheck: inputs must be float64, got " << in.data().str());
  }
  for (auto in : inputs) in.set_grad(Tensor());
  Variable out = fn(inputs);
  Tensor weights = Tensor::empty(out.shape(), DType::f64);
  Generator gen(1234);
  fill_uniform(weights, 0.5, 1.5, gen);
  out.backward(weights);

  GradcheckResult result;
  std::ostringstream report;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Variable& in = inputs[k];
    if (!in.requires_grad()) continue;
    Tensor analytic = in.grad().defined() ? in.grad() : Tensor::zeros(in.shape(), DType::f64);
    double* x = const_cast<Variable&>(in).data().data<double>();
    double worst = 0.0, scale = 1.0;
    std::vector<double> numeric(static_cast<size_t>(in.numel()));
    for (int64_t i = 0; i < in.numel(); ++i) {
      double saved = x[i];
      double plus, minus;
      {
        NoGradGuard no_grad;
        x[i] = saved + eps;
        plus = weighted_sum(fn(inputs).data(), weights);
        x[i] = saved - eps;
        minus = weighted_sum(fn(inputs).data(), weights);
      }
      x[i] = saved;
      numeric[static_cast<size_t>(i)] = (plus - minus) / (2 * eps);
      scale = std::max(scale, std::abs(numeric[static_cast<size_t>(i)]));
    }
    const double* a = analytic.data<double>();
    for (int64_t i = 0; i < in.numel(); ++i)
      worst = std::max(worst, std::abs(a[i] - numeric[static_cast<size_t>(i)]));
    double rel = worst / scale;
    result.max_relative_error = std::max(result.max_relative_error, rel);
    report << "input " << k << " " << shape_str(in.shape()) << ": relative error " << rel << "; ";
  }
  result.report = report.str();
  return result;
}

}  // namespace tandem
