#include "autograd/nn_spectral_norm.h"

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/nn.h"

namespace tandem::nn {

namespace {

// x / max(||x||, eps), without history.
Variable normalize(const Variable& x, double eps) {
  return div(x, clamp(sqrt(sum(square(x))), eps, std::numeric_limits<double>::infinity()));
}

// A unit vector of `count` N(0, 1) draws from gen (drawn in float64, then cast), on `device`.
Tensor unit_draw(int64_t count, DType dtype, Device device, double eps, Generator& gen) {
  Tensor t = Tensor::empty({count}, DType::f64);
  fill_normal(t, 0.0, 1.0, gen);
  double norm = 0;
  for (double x : t.to_vector()) norm += x * x;
  norm = std::max(std::sqrt(norm), eps);
  double* p = t.data<double>();
  for (int64_t i = 0; i < count; ++i) p[i] /= norm;
  t = t.to(dtype);
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

Variable spectral_weight_matrix(const Variable& weight, int64_t dim) {
  TANDEM_CHECK(weight.defined() && weight.dim() >= 2 && dim >= 0 && dim < weight.dim(),
               "spectral_weight_matrix: needs a weight of 2 or more axes and an axis of it, got "
                   << (weight.defined() ? shape_str(weight.shape()) : "undefined") << " and axis " << dim);
  Variable w = weight;
  if (dim != 0) {
    std::vector<int64_t> order{dim};
    for (int64_t k = 0; k < weight.dim(); ++k)
      if (k != dim) order.push_back(k);
    w = permute(weight, order);
  }
  const int64_t rows = w.size(0);
  return reshape(w, {rows, w.numel() / rows});
}

void power_iteration(const Tensor& w_mat, Tensor& u, Tensor& v, int iterations, double eps) {
  TANDEM_CHECK(w_mat.dim() == 2 && u.shape() == Shape{w_mat.size(0)} && v.shape() == Shape{w_mat.size(1)},
               "power_iteration: u " << shape_str(u.shape()) << " and v " << shape_str(v.shape())
                                     << " do not fit the weight matrix " << shape_str(w_mat.shape()));
  TANDEM_CHECK(iterations >= 0, "power_iteration: iterations must be >= 0, got " << iterations);
  NoGradGuard no_grad;
  const int64_t h = w_mat.size(0), m = w_mat.size(1);
  const Variable w(w_mat);
  for (int i = 0; i < iterations; ++i) {
    const Variable v_new = normalize(matmul(w, Variable(u.view({h, 1})), /*transpose_a=*/true), eps);
    const Variable u_new = normalize(matmul(w, v_new), eps);
    v.copy_(v_new.data().view({m}));
    u.copy_(u_new.data().view({h}));
  }
}

Variable spectral_sigma(const Variable& w_mat, const Tensor& u, const Tensor& v) {
  TANDEM_CHECK(w_mat.defined() && w_mat.dim() == 2 && u.shape() == Shape{w_mat.size(0)} &&
                   v.shape() == Shape{w_mat.size(1)},
               "spectral_sigma: u " << shape_str(u.shape()) << " and v " << shape_str(v.shape())
                                    << " do not fit the weight matrix "
                                    << (w_mat.defined() ? shape_str(w_mat.shape()) : "undefined"));
  // Copies: the buffers change at the next update, the graph keeps these.
  const Variable u_col(u.clone().view({w_mat.size(0), 1})), v_col(v.clone().view({w_mat.size(1), 1}));
  return sum(mul(matmul(w_mat, v_col), u_col));
}

SpectralNorm::SpectralNorm(std::shared_ptr<Module> wrapped, SpectralNormOptions o, Generator& gen)
    : layer(std::move(wrapped)), options(o) {
  TANDEM_CHECK(layer != nullptr, "SpectralNorm: no layer given");
  TANDEM_CHECK(o.power_iterations >= 0 && o.eps > 0,
               "SpectralNorm: power_iterations must be >= 0 and eps > 0, got " << o.power_iterations
                                                                               << " and " << o.eps);
  if (dynamic_cast<ConvTranspose2d*>(layer.get())) {
    dim_ = 1;
  } else {
    TANDEM_CHECK(dynamic_cast<Linear*>(layer.get()) || dynamic_cast<Conv2d*>(layer.get()),
                 "SpectralNorm: wraps Linear, Conv2d or ConvTranspose2d, not " << layer->type_name());
  }
  register_module("layer", layer);
  const Variable w = raw_weight();
  const int64_t h = w.size(dim_), m = w.numel() / h;
  u_ = &register_buffer("u", unit_draw(h, w.dtype(), w.device(), o.eps, gen));
  v_ = &register_buffer("v", unit_draw(m, w.dtype(), w.device(), o.eps, gen));
}

Variable SpectralNorm::raw_weight() const {
  if (auto* l = dynamic_cast<Linear*>(layer.get())) return l->weight;
  if (auto* c = dynamic_cast<Conv2d*>(layer.get())) return c->weight;
  return static_cast<ConvTranspose2d*>(layer.get())->weight;
}

Variable SpectralNorm::weight() {
  const Variable w = raw_weight();
  const Variable w_mat = spectral_weight_matrix(w, dim_);
  if (is_training()) power_iteration(w_mat.data(), *u_, *v_, options.power_iterations, options.eps);
  const Variable sigma = spectral_sigma(w_mat, *u_, *v_);
  return div(w, reshape(sigma, Shape(static_cast<size_t>(w.dim()), 1)));
}

Variable SpectralNorm::forward(const Variable& x) {
  const Variable w = weight();  // sigma in float32
  const PrecisionScope precision = precision_scope();
  if (auto* l = dynamic_cast<Linear*>(layer.get())) return linear(x, w, l->bias);
  if (auto* c = dynamic_cast<Conv2d*>(layer.get())) return conv2d(x, w, c->bias, c->params);
  auto* t = static_cast<ConvTranspose2d*>(layer.get());
  return conv_transpose2d(x, w, t->bias, t->params);
}

std::string SpectralNorm::type_name() const { return "SpectralNorm(" + layer->type_name() + ")"; }

}  // namespace tandem::nn
