#include "models/path_length.h"

#include <cmath>

#include "autograd/grad.h"
#include "autograd/ops.h"

namespace tandem::models {

PathLengthTerm path_length_penalty(const Variable& images, const Variable& ws, const Tensor& noise,
                                   Tensor& pl_mean, double decay, dist::ProcessGroup* group) {
  TANDEM_CHECK(images.dim() == 4 && ws.dim() == 3 && ws.size(0) == images.size(0),
               "path length: the images " << shape_str(images.shape()) << " and the latents "
                                          << shape_str(ws.shape())
                                          << " must be [n, C, H, W] and [n, layers, w_dim]");
  TANDEM_CHECK(noise.shape() == images.shape(), "path length: the noise " << shape_str(noise.shape())
                                                                          << " is not of the images' shape "
                                                                          << shape_str(images.shape()));
  const double pixels = static_cast<double>(images.size(2) * images.size(3));
  Variable y(noise.to(images.device()).to(images.dtype()));
  Variable g = grad({sum(images * scale(y, 1.0 / std::sqrt(pixels)))}, {ws}, {}, {.create_graph = true})[0];
  Variable lengths = sqrt(mean(sum(square(g), 2), 1));  // [n]

  // The global batch's mean length: this rank's sum and count, summed over the group.
  Tensor totals =
      Tensor::from_values({2}, {sum(lengths).item(), static_cast<double>(lengths.size(0))}, DType::f64);
  if (group != nullptr && group->size() > 1)
    dist::allreduce_host(*group, totals, dist::ReduceOp::sum, "path length: the batch's mean");
  const std::vector<double> t = totals.to_vector();
  const double global_mean = t[0] / t[1];
  const double before = pl_mean.item();
  const double m = before + decay * (global_mean - before);
  pl_mean.fill_(m);

  Variable centred = lengths - m;
  Variable penalty = mean(square(centred));
  PathLengthTerm term;
  term.penalty = penalty.item();
  term.mean = m;
  term.loss = penalty - 2.0 * decay * (global_mean - m) * mean(lengths);
  return term;
}

}  // namespace tandem::models
