// FID during training (tandem-train --fid-every K --fid-samples N --fid-cache DIR).
//
// Contract:
// - check_fid_options(o, given) refuses (UsageError naming the flag): --fid-samples or
//   --fid-cache or --fid-network without --fid-every; --fid-every on data other than fashion-mnist or a model
//   whose samples are not 1-channel 28x28 images at every iteration (mlp and dcgan are); a
//   --fid-every that is not a multiple of --log-every (FID joins the log point's line).
// - FidMonitor(o, world, ema_on, out) makes the FidEvaluator (metrics/fid_evaluator.h) of
//   --fid-network, --fid-cache, --fid-samples and the seed's FID stream: the feature network
//   (the shipped one, or trained here on first use) and the real
//   statistics of Fashion-MNIST's 10000 test images, made once and cached; rank 0
//   prints one line naming the network's short hash, its test accuracy and where the
//   samples come from. Collective.
// - due(done, last): --fid-every divides done, or the run's last iteration.
// - compute(model, ema, device): the FID of N generated samples against the real
//   statistics (metrics/fid_eval.h: the sample set split over the ranks, one allreduce; the
//   same set at any rank count), generated with the EMA weights when EMA is on, in training
//   mode as the sample pictures are (batch norm's buffers put back). Collective; returns the
//   same value on every rank: NaN when the samples are not finite (then line() says so).
// - name(): the log's field, "fid_ema" when the samples come from the EMA generator, else
//   "fid". line(i, value): FidEvaluator::line under that name.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "models/gan.h"
#include "models/metrics/fid_evaluator.h"
#include "models/resampling_filter.h"
#include "models/train/train_options.h"
#include "models/training/ema_weights.h"
#include "runtime/dist/process_group.h"

namespace tandem::models {

void check_fid_options(const TrainOptions& options, const FlagGiven& given);

// Set (tests only): every FID computation fails, as one that runs out of memory would; the
// log point's checkpoint must be on disk by then (tests/train/mpi/test_train.cpp).
inline constexpr const char* kFidFaultEnv = "TANDEM_FAULT_FID_EVALUATION";

class FidMonitor {
 public:
  FidMonitor(const TrainOptions& options, dist::ProcessGroup& world, bool ema_on, std::ostream* out);
  ~FidMonitor();
  bool due(int64_t done, bool last) const;
  double compute(GanModel& model, const training::EmaWeights& ema, Device device);
  const std::string& name() const { return name_; }
  std::string line(int64_t iteration, double value) const;

 private:
  int64_t every_;
  std::string name_;
  std::unique_ptr<metrics::FidEvaluator> evaluator_;
  ResamplingFilter blur_{{1, 3, 3, 1}};  // halves samples larger than the feature network's 28x28
};

}  // namespace tandem::models
