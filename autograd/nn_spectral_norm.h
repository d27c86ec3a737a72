// Spectral normalisation as a weight parametrisation (torch.nn.utils.spectral_norm's
// semantics): a layer's weight is used as W / sigma, sigma an estimate of W's largest
// singular value kept up to date by power iteration.
//
// Contract:
// - The weight as a matrix: W [out, -1], out along weight axis `dim` moved to the front
//   (spectral_weight_matrix): dim 0 for Linear [out, in] and Conv2d [out, in, k, k], dim 1
//   for ConvTranspose2d [in, out, k, k].
// - power_iteration(w_mat, u, v, n, eps): n times v = normalize(W^T u), u = normalize(W v)
//   (normalize(x) = x / max(||x||, eps)), in place on u [out] and v [in'] (in' = W's
//   columns) from W's values; no graph is recorded. Either device, u and v on W's device
//   and in its dtype.
// - spectral_sigma(w_mat, u, v): sigma = u^T W v with u and v constants, a differentiable
//   0-d function of W (every order: an R1 penalty differentiates through W / sigma).
// - SpectralNorm(layer, options, gen) wraps a Linear, Conv2d or ConvTranspose2d (an Error
//   names any other type). The layer is its child "layer" (its parameters keep their
//   names under it); u [out] and v [in'] are buffers "u" and "v", drawn N(0, 1) from `gen`
//   and normalised, in the weight's dtype. forward(x): in training mode first
//   options.power_iterations steps of power_iteration update u and v; then the layer's op
//   runs with weight / spectral_sigma(W, u, v) and the layer's own bias and geometry. In
//   eval mode u and v are left alone (the stored ones give sigma). weight() is that
//   normalised weight without running the layer (it updates u and v in training mode too).
// - Data parallel: every rank must use the same u and v. They are buffers drawn from the
//   module's generator, identical on every rank built with the same seed (and broadcast
//   from rank 0 at wrap time, as every buffer: reducer/ddp.h), and each update is computed
//   from the weight alone, so as long as the weights are replicas (the Reducer's contract)
//   u and v stay bitwise replicas with no communication. A rank must run the same number
//   of training-mode forwards per step as every other (one per D call, as one process on
//   the global batch does).
#pragma once

#include <memory>
#include <string>

#include "autograd/module.h"
#include "autograd/ops.h"
#include "runtime/rng.h"

namespace tandem::nn {

struct SpectralNormOptions {
  int power_iterations = 1;  // per training-mode forward (>= 0)
  double eps = 1e-12;        // normalize's floor on the norm
};

Variable spectral_weight_matrix(const Variable& weight, int64_t dim);
void power_iteration(const Tensor& w_mat, Tensor& u, Tensor& v, int iterations, double eps = 1e-12);
Variable spectral_sigma(const Variable& w_mat, const Tensor& u, const Tensor& v);

class SpectralNorm : public Module {
 public:
  explicit SpectralNorm(std::shared_ptr<Module> layer, SpectralNormOptions options = {},
                        Generator& gen = default_generator());
  Variable forward(const Variable& x) override;
  Variable weight();
  std::string type_name() const override;

  std::shared_ptr<Module> layer;
  SpectralNormOptions options;

 private:
  Variable raw_weight() const;
  Tensor* u_ = nullptr;  // the buffers "u" and "v" (stable addresses, module.h)
  Tensor* v_ = nullptr;
  int64_t dim_ = 0;
};

}  // namespace tandem::nn
