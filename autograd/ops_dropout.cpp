#include "autograd/ops.h"
#include "runtime/global_draws.h"

namespace tandem {

Variable dropout(const Variable& x, double p, bool training, uint64_t seed, int64_t iteration, int rank,
                 int world) {
  TANDEM_CHECK(x.defined() && x.dim() >= 1,
               "dropout: needs [N, ...], got " << (x.defined() ? shape_str(x.shape()) : "undefined"));
  TANDEM_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got " << p);
  if (!training || p == 0.0) return x;
  // The mask is a constant drawn on the host (as every fill is, runtime/rng.h) and moved to
  // x's device: mul's kernels and rules do the rest, on either device and at every order.
  Tensor mask = dropout_mask_global_rows(x.shape(), p, seed, iteration, rank, world, x.dtype());
  return mul(x, Variable(x.device().is_cpu() ? mask : mask.to(x.device())));
}

}  // namespace tandem
