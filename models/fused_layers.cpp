#include "models/fused_layers.h"

#include <optional>

namespace tandem::models {

namespace {

struct FusedActivation {
  kernels::Activation act;
  double slope = 0.0;
};

std::optional<FusedActivation> activation_of(const nn::Module& m) {
  if (dynamic_cast<const nn::ReLU*>(&m) != nullptr) return FusedActivation{kernels::Activation::relu};
  if (const auto* l = dynamic_cast<const nn::LeakyReLU*>(&m); l != nullptr && l->slope > 0)
    return FusedActivation{kernels::Activation::leaky_relu, l->slope};
  if (dynamic_cast<const nn::Tanh*>(&m) != nullptr) return FusedActivation{kernels::Activation::tanh};
  if (dynamic_cast<const nn::Sigmoid*>(&m) != nullptr) return FusedActivation{kernels::Activation::sigmoid};
  return std::nullopt;
}

// The layer's output without its bias, and the bias; nothing for other modules or a
// layer without a bias.
std::optional<std::pair<Variable, Variable>> without_bias(const nn::Module& m, const Variable& x) {
  const PrecisionScope precision = m.precision_scope();
  if (const auto* l = dynamic_cast<const nn::Linear*>(&m); l != nullptr && l->bias.defined())
    return std::pair{linear(x, l->weight, Variable()), l->bias};
  if (const auto* c = dynamic_cast<const nn::Conv2d*>(&m); c != nullptr && c->bias.defined())
    return std::pair{conv2d(x, c->weight, Variable(), c->params), c->bias};
  if (const auto* t = dynamic_cast<const nn::ConvTranspose2d*>(&m); t != nullptr && t->bias.defined())
    return std::pair{conv_transpose2d(x, t->weight, Variable(), t->params), t->bias};
  return std::nullopt;
}

}  // namespace

Variable forward_fused(const nn::Sequential& layers, const Variable& x) {
  Variable y = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    const nn::Module& m = *layers[i];
    if (i + 1 < layers.size()) {
      if (std::optional<FusedActivation> act = activation_of(*layers[i + 1])) {
        if (auto pre = without_bias(m, y)) {
          y = bias_activation(pre->first, pre->second, act->act, act->slope);
          ++i;
          continue;
        }
      }
    }
    y = layers[i]->forward(y);
  }
  return y;
}

}  // namespace tandem::models
