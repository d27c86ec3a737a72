// all_finite: a composite of device-routed kernels (scale, sum_all), so it has no twin.
#include "kernels/non_finite.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace tandem::kernels {

bool all_finite(const Tensor& t) { return std::isfinite(sum_all(scale(t, 0.0)).item()); }

}  // namespace tandem::kernels
