#include "autograd/nn_stylegan_nets.h"

#include <cmath>

namespace tandem::nn {

Variable stylegan_activation(const Variable& x, const StyleGanActivation& act) {
  Variable y = scale(leaky_relu(x, act.slope), act.gain);
  return act.clamp >= 0 ? clamp(y, -act.clamp, act.clamp) : y;
}

ResidualBlock::ResidualBlock(int64_t in, int64_t out, StyleGanActivation a, Generator& gen) : act(a) {
  TANDEM_CHECK(in > 0 && out > 0,
               "ResidualBlock: channel counts must be positive, got " << in << " -> " << out);
  conv1 =
      register_module("conv1", std::make_shared<EqualizedConv2d>(in, out, 3, 1, 1, EqualizedOptions{}, gen));
  conv2 =
      register_module("conv2", std::make_shared<EqualizedConv2d>(out, out, 3, 1, 1, EqualizedOptions{}, gen));
  if (in != out) {
    skip = register_module(
        "skip", std::make_shared<EqualizedConv2d>(in, out, 1, 1, 0, EqualizedOptions{.bias = false}, gen));
  }
}

Variable ResidualBlock::forward(const Variable& x) {
  TANDEM_CHECK(x.defined() && x.dim() == 4 && x.size(1) == conv1->in_channels,
               "ResidualBlock: needs [N, " << conv1->in_channels << ", H, W], got "
                                           << (x.defined() ? shape_str(x.shape()) : "undefined"));
  const Variable h = stylegan_activation(conv2->forward(stylegan_activation(conv1->forward(x), act)), act);
  return scale(add(h, skip ? skip->forward(x) : x), 1.0 / std::sqrt(2.0));
}

std::string ResidualBlock::type_name() const {
  return "ResidualBlock(" + std::to_string(conv1->in_channels) + ", " + std::to_string(conv1->out_channels) +
         ")";
}

MappingNetwork::MappingNetwork(int64_t z, int64_t w, MappingOptions o, Generator& gen)
    : z_dim(z), w_dim(w), options(o) {
  TANDEM_CHECK(
      z > 0 && w > 0 && o.layers > 0,
      "MappingNetwork: z_dim, w_dim and layers must be positive, got " << z << ", " << w << ", " << o.layers);
  for (int64_t i = 0; i < o.layers; ++i) {
    layers.push_back(
        register_module("fc" + std::to_string(i),
                        std::make_shared<EqualizedLinear>(
                            i == 0 ? z : w, w, EqualizedOptions{.lr_multiplier = o.lr_multiplier}, gen)));
  }
}

Variable MappingNetwork::forward(const Variable& z) {
  TANDEM_CHECK(z.defined() && z.dim() == 2 && z.size(1) == z_dim,
               "MappingNetwork: needs z [N, " << z_dim << "], got "
                                              << (z.defined() ? shape_str(z.shape()) : "undefined"));
  Variable h = pixel_norm(z);
  for (const auto& fc : layers) h = stylegan_activation(fc->forward(h), options.act);
  return h;
}

std::string MappingNetwork::type_name() const {
  return "MappingNetwork(" + std::to_string(z_dim) + ", " + std::to_string(w_dim) + ", " +
         std::to_string(options.layers) + " layers)";
}

}  // namespace tandem::nn
