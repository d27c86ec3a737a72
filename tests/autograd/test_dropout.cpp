// dropout (autograd/ops.h): the global-batch mask of runtime/global_draws.h in training
// mode (rank by rank, as N ranks would draw it), the identity in eval mode, the mask as
// its gradient, and the named errors.
#include <catch2/catch.hpp>
#include <vector>

#include "autograd/ops.h"
#include "runtime/global_draws.h"

using namespace tandem;

TEST_CASE("dropout: the global mask in training, the identity in eval; its gradient is the mask",
          "[rng][global_draws][dropout]") {
  const Shape shape{3, 4};
  for (int world = 1; world <= 3; ++world) {
    for (int r = 0; r < world; ++r) {
      Variable x(Tensor::from_values(shape, {1, -2, 3, 4, 5, 6, -7, 8, 9, 10, 11, 12}, DType::f64), true);
      const Tensor mask = dropout_mask_global_rows(shape, 0.4, 9, 5, r, world, DType::f64);
      const Variable y = dropout(x, 0.4, true, 9, 5, r, world);
      const std::vector<double> xv = x.data().to_vector(), mv = mask.to_vector(), yv = y.data().to_vector();
      for (size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == xv[i] * mv[i]);
      sum(y).backward();
      CHECK(x.grad().to_vector() == mv);
    }
  }
  Variable x(Tensor::from_values({2, 2}, {1, 2, 3, 4}, DType::f64), true);
  CHECK(dropout(x, 0.4, false, 9, 5).data().to_vector() == x.data().to_vector());
  CHECK(dropout(x, 0.0, true, 9, 5).data().to_vector() == x.data().to_vector());
  CHECK(dropout(x, 1.0, true, 9, 5).data().to_vector() == std::vector<double>{0, 0, 0, 0});
  CHECK_THROWS_WITH(dropout(x, -0.1, true, 9, 5), Catch::Contains("dropout: p must be in [0, 1], got -0.1"));
}
