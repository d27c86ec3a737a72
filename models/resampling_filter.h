// ResamplingFilter: a model's FIR resampling filter (setup_separable_filter of its taps:
// StyleGAN2's setup_filter in the separable form, which upfirdn2d runs as two 1-D passes),
// made once per dtype and device and kept, so that a step neither rebuilds it on the host
// nor copies it to the device (a copy a captured CUDA-graph step cannot hold).
#pragma once

#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace tandem::models {

class ResamplingFilter {
 public:
  explicit ResamplingFilter(std::vector<double> taps) : taps_(std::move(taps)) {}
  // The filter in x's dtype, on x's device.
  const Tensor& operator()(const Variable& x) {
    if (!filter_.defined() || filter_.dtype() != x.dtype() || filter_.device() != x.device())
      filter_ = setup_separable_filter(taps_, x.dtype(), x.device());
    return filter_;
  }

 private:
  std::vector<double> taps_;
  Tensor filter_;
};

}  // namespace tandem::models
