// forward_fused against the Sequential's own forward: the same outputs and gradients, bit
// for bit on the CPU, for dcgan's and dcgan64's parts (biased layers with LeakyReLU, Tanh)
// and for a stack with every fusable activation.
#include <catch2/catch.hpp>
#include <cstring>

#include "autograd/nn.h"
#include "autograd/ops.h"
#include "models/fused_layers.h"
#include "models/gan.h"
#include "runtime/rng.h"
#include "tests/bitwise_equal.h"

using namespace tandem;
using namespace tandem::models;
using tandem::testing::bitwise_equal;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

// Runs `forward` on x, backpropagates sum(y * w) and returns y, x's gradient and every
// parameter's gradient (then cleared).
std::vector<Tensor> run(nn::Module& layers, const std::function<Variable(const Variable&)>& forward,
                        const Tensor& x_data, uint64_t seed) {
  Variable x(x_data.clone(), true);
  Variable y = forward(x);
  Variable w(random_tensor(y.shape(), seed));
  sum(mul(y, w)).backward();
  std::vector<Tensor> out{y.data().clone(), x.grad().clone()};
  for (auto& [name, p] : layers.named_parameters()) {
    out.push_back(p.grad().clone());
    p.set_grad(Tensor());
  }
  return out;
}

void require_fused_matches(nn::Sequential& layers, const Tensor& x, const std::string& what) {
  std::vector<Tensor> plain = run(
      layers, [&](const Variable& v) { return layers.forward(v); }, x, 7);
  std::vector<Tensor> fused = run(
      layers, [&](const Variable& v) { return forward_fused(layers, v); }, x, 7);
  REQUIRE(plain.size() == fused.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    INFO(what << ": output " << i << " (0: y, 1: x's gradient, then the parameters')");
    CHECK(bitwise_equal(fused[i], plain[i]));
  }
}

}  // namespace

TEST_CASE("forward_fused gives the unfused forward's output and gradients bit for bit", "[models][fused]") {
  Generator gen(3);
  nn::Sequential every;
  every.push_back(std::make_shared<nn::Linear>(6, 5, true, gen));
  every.push_back(std::make_shared<nn::ReLU>());
  every.push_back(std::make_shared<nn::Linear>(5, 5, true, gen));
  every.push_back(std::make_shared<nn::Sigmoid>());
  every.push_back(std::make_shared<nn::Linear>(5, 5, false, gen));  // no bias: runs unfused
  every.push_back(std::make_shared<nn::Tanh>());
  every.push_back(std::make_shared<nn::Linear>(5, 4, true, gen));
  every.push_back(std::make_shared<nn::LeakyReLU>(0.2));
  every.push_back(std::make_shared<nn::Linear>(4, 1, true, gen));  // last: nothing to fuse
  require_fused_matches(every, random_tensor({7, 6}, 1), "linear stack");

  for (const std::string name : {"dcgan", "dcgan64"}) {
    std::shared_ptr<GanModel> model =
        make_gan(GanConfig{.model = name, .seed = 4, .width = name == "dcgan64" ? 4 : 0});
    auto& g = static_cast<nn::Sequential&>(*model->generator);
    auto& d = static_cast<nn::Sequential&>(*model->discriminator);
    const Shape sample = model->sample_shape();
    require_fused_matches(d, random_tensor({3, sample[0], sample[1], sample[2]}, 2), name + " discriminator");
    Tensor z = random_tensor({3, model->noise_dim()}, 5);
    if (name == "dcgan64") z = z.reshape({3, model->noise_dim(), 1, 1});
    require_fused_matches(g, z, name + " generator");
  }
}
