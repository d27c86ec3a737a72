// Spectral normalisation through the Reducer at 1-3 ranks against the single-process
// oracle: a tiny spectrally normalised discriminator (conv, then linear) trained with SGD on
// the non-saturating loss + R1 (its second order goes through W / sigma), each rank on its
// rows of the global batch (randn_global_rows). N ranks must end with the parameters and the
// power-iteration vectors u, v of one process on the whole batch (relative 1e-5, absolute
// floor 1e-6) and with bitwise identical replicas of both, without any communication for u
// and v beyond the buffers' broadcast at wrap time.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "autograd/nn.h"
#include "autograd/nn_spectral_norm.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "models/gradient_penalty.h"
#include "reducer/ddp.h"
#include "runtime/rng.h"
#include "tests/mpi_world.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr int kIterations = 5;
constexpr double kR1Gamma = 10.0;
constexpr uint64_t kRealKey = 0x5107, kFakeKey = 0x5108;

// D(x) for x [N, 1, 4, 4]: SN(conv 3x3, 1 -> 4), leaky ReLU, SN(linear 64 -> 1).
class TinyDiscriminator : public DataParallelModel {
 public:
  TinyDiscriminator() {
    Generator gen(11);  // the same on every rank: the same weights, u and v
    conv = register_module(
        "conv", std::make_shared<nn::SpectralNorm>(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, gen),
                                                   nn::SpectralNormOptions{}, gen));
    fc = register_module("fc",
                         std::make_shared<nn::SpectralNorm>(std::make_shared<nn::Linear>(64, 1, true, gen),
                                                            nn::SpectralNormOptions{}, gen));
  }
  Variable forward(const Variable& x) override {
    return fc->forward(flatten(leaky_relu(conv->forward(x), 0.2)));
  }

  std::shared_ptr<nn::SpectralNorm> conv, fc;
};

struct Trained {
  std::vector<Tensor> parameters, buffers;
};

// Trains on rows [rank * B, (rank + 1) * B) of each global batch of kGlobalBatch rows
// (B = kGlobalBatch / world) through a DistributedDataParallel, or, for the oracle
// (distributed false), on the whole batch in one process.
Trained train(bool distributed) {
  auto d = std::make_shared<TinyDiscriminator>();
  std::unique_ptr<DistributedDataParallel> ddp;
  if (distributed) ddp = std::make_unique<DistributedDataParallel>(d, world());
  const int rank = distributed ? world()->rank() : 0, size = distributed ? world()->size() : 1;
  const int64_t rows = kGlobalBatch / size;
  optim::SGD sgd(d->parameters(), {.lr = 0.05, .momentum = 0.5});
  for (int it = 0; it < kIterations; ++it) {
    Variable real(randn_global_rows({rows, 1, 4, 4}, kRealKey, it, rank, size), /*requires_grad=*/true);
    const Variable fake(
        add_scalar(Variable(randn_global_rows({rows, 1, 4, 4}, kFakeKey, it, rank, size)), 1.0));
    const Variable d_real = d->forward(real);  // each training forward: one power iteration per layer
    const Variable d_fake = d->forward(fake);
    const Variable loss = mean(softplus(neg(d_real))) + mean(softplus(d_fake)) +
                          kR1Gamma / 2 * models::r1_penalty(d_real, real);
    sgd.zero_grad();
    loss.backward();
    sgd.step();
  }
  Trained t;
  for (const Variable& p : d->parameters()) t.parameters.push_back(p.data().clone());
  for (const Tensor& b : d->buffers()) t.buffers.push_back(b.clone());
  return t;
}

}  // namespace

TEST_CASE("a spectrally normalised discriminator at N ranks equals one process; u and v stay replicas",
          "[reducer][oracle][spectral_norm]") {
  const Trained oracle = train(false);
  const Trained got = train(true);
  INFO(world()->size() << " ranks");
  REQUIRE(got.buffers.size() == 4);  // u and v of each layer
  require_close(got.parameters, oracle.parameters, 1e-5);
  require_close(got.buffers, oracle.buffers, 1e-5);
  require_replicas_identical(got.parameters, *world());
  require_replicas_identical(got.buffers, *world());
  // The vectors moved from their draw: the power iteration ran in the training forwards.
  const Trained drawn{{}, [] {
                        std::vector<Tensor> b;
                        for (const Tensor& t : TinyDiscriminator().buffers()) b.push_back(t.clone());
                        return b;
                      }()};
  double moved = 0;
  for (size_t i = 0; i < drawn.buffers.size(); ++i) {
    const std::vector<double> a = drawn.buffers[i].to_vector(), b = got.buffers[i].to_vector();
    for (size_t k = 0; k < a.size(); ++k) moved = std::max(moved, std::abs(a[k] - b[k]));
  }
  CHECK(moved > 1e-2);
}
