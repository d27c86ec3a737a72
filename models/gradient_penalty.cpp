#include "models/gradient_penalty.h"

#include <cmath>

#include "autograd/grad.h"
#include "autograd/grad_mode.h"
#include "autograd/nn.h"
#include "autograd/ops.h"

namespace tandem::models {

namespace {

// ||grad_x D(x)_i||^2 for each critic sample i, as a [samples] Variable with history.
Variable squared_gradient_norms(const Variable& critic_out, const Variable& x, double inner_scale) {
  TANDEM_CHECK(critic_out.dim() >= 1 && critic_out.size(0) > 0, "gradient penalty: the critic's output "
                                                                    << shape_str(critic_out.shape())
                                                                    << " has no samples");
  const int64_t samples = critic_out.size(0);
  TANDEM_CHECK(x.size(0) % samples == 0, "gradient penalty: " << x.size(0)
                                                              << " input rows do not split evenly over "
                                                              << samples << " critic samples");
  TANDEM_CHECK(std::isfinite(inner_scale) && inner_scale > 0,
               "gradient penalty: inner scale " << inner_scale << " must be positive and finite");
  Variable g;
  if (inner_scale == 1.0) {
    g = grad({sum(critic_out)}, {x}, {}, {.create_graph = true})[0];
  } else {
    g = grad({sum(critic_out) * inner_scale}, {x}, {}, {.create_graph = true})[0] * (1.0 / inner_scale);
  }
  return sum(square(reshape(g, {samples, g.numel() / samples})), 1);
}

}  // namespace

Variable interpolate(const Tensor& real, const Tensor& fake, const Tensor& mix) {
  TANDEM_CHECK(real.shape() == fake.shape(), "interpolate: real " << shape_str(real.shape()) << " and fake "
                                                                  << shape_str(fake.shape()) << " differ");
  const int64_t rows = real.size(0), width = real.numel() / rows;
  TANDEM_CHECK(mix.numel() == rows,
               "interpolate: " << mix.numel() << " coefficients for " << rows << " samples");
  NoGradGuard no_grad;
  // The outer product mix x ones spreads each sample's coefficient over its row.
  Variable spread =
      matmul(Variable(mix.reshape({rows, 1})), Variable(Tensor::ones({1, width}, mix.dtype(), mix.device())));
  Variable r(real.reshape({rows, width})), f(fake.reshape({rows, width}));
  Variable mixed = f + spread * (r - f);
  return Variable(mixed.data().reshape(real.shape()), /*requires_grad=*/true);
}

Variable wgan_gp_penalty(const Variable& critic_out, const Variable& x, double inner_scale) {
  return mean(square(sqrt(squared_gradient_norms(critic_out, x, inner_scale)) - 1.0));
}

Variable r1_penalty(const Variable& critic_out, const Variable& x, double inner_scale) {
  return mean(squared_gradient_norms(critic_out, x, inner_scale));
}

void check_critic_for_penalty(nn::Module& critic, const std::string& model, const std::string& what) {
  for (const auto& [name, module] : critic.named_modules()) {
    TANDEM_CHECK(dynamic_cast<nn::BatchNorm*>(module) == nullptr,
                 what << ": the critic (discriminator) of '" << model << "' has batch norm ("
                      << (name.empty() ? "the critic itself" : name)
                      << "); a gradient penalty takes each sample's own gradient, which batch norm mixes "
                         "across the batch (which is why WGAN-GP forbids batch norm in the critic)");
  }
}

}  // namespace tandem::models
