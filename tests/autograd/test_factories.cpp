// Factories: randn from a given generator (noise of its own per rank) or the default one.
#include <catch2/catch.hpp>

#include "autograd/ops.h"
#include "runtime/rng.h"

using namespace tandem;

TEST_CASE("randn draws from the generator it is given and leaves the default one alone", "[factories]") {
  Generator reference(42);
  Tensor expected = Tensor::empty({3, 5});
  fill_normal(expected, 0.0, 1.0, reference);

  manual_seed(7);
  const Generator::State default_before = default_generator().state();
  Generator gen(42);
  Variable z = randn({3, 5}, gen, true);
  CHECK(z.shape() == Shape{3, 5});
  CHECK(z.requires_grad());
  CHECK(z.data().to_vector() == expected.to_vector());
  CHECK(gen.state().counter == reference.state().counter);
  CHECK(default_generator().state().counter == default_before.counter);

  // Generators seeded from the rank give each rank its own noise.
  Generator rank0(1000), rank1(1001);
  CHECK(randn({8}, rank0).data().to_vector() != randn({8}, rank1).data().to_vector());

  // Without a generator: the default one, as before.
  manual_seed(42);
  CHECK(randn({3, 5}).data().to_vector() == expected.to_vector());
}
