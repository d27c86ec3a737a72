// A LayerDrop-style model shared by the Reducer suites: ten optional residual linear
// layers, a seeded random subset of them used at each iteration, so that nearly every
// iteration's backward reaches another set of parameters (a new Reducer phase).
//
// Contract: the same seed gives the same weights on every rank, and layer_drop_subset(i)
// gives the same non-empty subset on every rank for iteration i. Each layer is its own
// part ("layer3.weight"): every rank uses the same subset, so the parts never diverge.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "reducer/ddp.h"
#include "runtime/rng.h"

namespace tandem::testing {

constexpr int kLayerDropLayers = 10;

class LayerDropModel : public DataParallelModel {
 public:
  LayerDropModel(int64_t width, uint64_t seed) {
    Generator gen(seed);
    for (int k = 0; k < kLayerDropLayers; ++k) {
      layers.push_back(register_module("layer" + std::to_string(k),
                                       std::make_shared<nn::Linear>(width, width, true, gen)));
    }
  }
  std::string type_name() const override { return "LayerDropModel"; }

  // Mean square of x passed through the layers in `use`, each as h + relu(layer(h)).
  Variable loss(const Variable& x, const std::vector<bool>& use) {
    Variable h = x;
    for (int k = 0; k < kLayerDropLayers; ++k) {
      if (use[static_cast<size_t>(k)]) h = h + relu(layers[static_cast<size_t>(k)]->forward(h));
    }
    return mean(square(h));
  }

  std::vector<std::shared_ptr<nn::Linear>> layers;
};

// The layers used at `iteration`: a non-empty random subset, the same on every rank.
inline std::vector<bool> layer_drop_subset(int iteration) {
  Generator gen(0x1a7e4d00 + static_cast<uint64_t>(iteration));
  const uint64_t mask = 1 + gen.below((uint64_t{1} << kLayerDropLayers) - 1);
  std::vector<bool> use(kLayerDropLayers);
  for (int k = 0; k < kLayerDropLayers; ++k) use[static_cast<size_t>(k)] = ((mask >> k) & 1) != 0;
  return use;
}

}  // namespace tandem::testing
