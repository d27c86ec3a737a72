// The Reducer's check of the averaged gradients for NaN and Inf (ReducerOptions::non_finite,
// reducer/reducer.h): one reduction per bucket, per parameter only on the failure path.
#include <string>
#include <vector>

#include "kernels/non_finite.h"
#include "reducer/reducer.h"

namespace tandem {

void Reducer::check_finite(Phase& phase) {
  std::vector<std::string> bad;
  for (Bucket& b : phase.buckets) {
    if (kernels::all_finite(b.grad_bucket.buffer)) continue;
    // Scrubbing writes the buffer, which the transport may still be delivering from (the
    // other ranks of a shared-memory bucket read this rank's reduced slice): release() first
    // (bucket_transport.h).
    if (options_.non_finite == NonFinitePolicy::scrub) b.transport->release(b);
    for (size_t k = 0; k < b.params.size(); ++k) {  // only on the failure path: per parameter
      size_t i = b.params[k];
      Tensor grad = b.grad_bucket.buffer.view_range(b.offsets[k], params_[i].shape());
      if (kernels::all_finite(grad)) continue;
      bad.push_back(names_[i]);
      if (options_.non_finite != NonFinitePolicy::scrub) continue;
      // The averages are equal on every rank, so the scrubbed values and counts are too.
      if (scrubbed_.empty()) scrubbed_.assign(params_.size(), 0);
      scrubbed_[i] += kernels::scrub_non_finite_(grad, kScrubLimit);
    }
  }
  if (bad.empty()) return;
  ++non_finite_backwards_;
  if (options_.non_finite == NonFinitePolicy::scrub) return;
  std::string list;
  for (size_t k = 0; k < bad.size() && k < 8; ++k) list += (k ? ", '" : "'") + bad[k] + "'";
  if (bad.size() > 8) list += " and " + std::to_string(bad.size() - 8) + " more";
  if (options_.non_finite == NonFinitePolicy::stop) {
    TANDEM_FAIL("Reducer for " << options_.name << ": non-finite (NaN or Inf) averaged gradient in " << list
                               << " (phase " << phase.id << ", synced backward " << synced_backwards_ + 1
                               << "); every rank stops here. Lower the learning rate, or set "
                               << "ReducerOptions::non_finite (DdpOptions::reducer.non_finite) to "
                               << "NonFinitePolicy::skip_step to skip such steps");
  }
  for (std::string& name : bad) non_finite_names_.push_back(std::move(name));
}

bool Reducer::take_non_finite(std::vector<std::string>* names) {
  if (non_finite_names_.empty()) return false;
  if (names != nullptr) *names = non_finite_names_;
  non_finite_names_.clear();
  return true;
}

}  // namespace tandem
