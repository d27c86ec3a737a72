#include "models/train/batch_prefetcher.h"

#include "runtime/error.h"

#if TANDEM_HAVE_CUDA
#include "runtime/cuda/async_upload.h"
#endif

namespace tandem::models {

#if TANDEM_HAVE_CUDA
struct BatchPrefetcher::Staged {
  explicit Staged(Device device) : uploader(device) {}
  cuda::AsyncUploader uploader;
  int64_t iteration = -1;  // of `upload`; -1: none staged
  cuda::AsyncUploader::Upload upload;

  void stage(const BatchMaker& maker, int64_t it) {
    LabeledBatch b = maker.make(it);
    upload = uploader.start({b.inputs, b.targets, b.aux, b.labels});
    iteration = it;
  }
};
#else
struct BatchPrefetcher::Staged {};
#endif

BatchPrefetcher::BatchPrefetcher(const BatchMaker& maker_on_cpu, Device device)
    : maker_(maker_on_cpu), device_(device) {
#if TANDEM_HAVE_CUDA
  if (device.is_cuda()) staged_ = std::make_unique<Staged>(device);
#else
  TANDEM_CHECK(!device.is_cuda(), "batches for " << device.str() << ": this build has no CUDA");
#endif
}

BatchPrefetcher::~BatchPrefetcher() = default;

LabeledBatch BatchPrefetcher::take(int64_t iteration, int64_t next_iteration) {
  if (!staged_) return maker_.make(iteration);
#if TANDEM_HAVE_CUDA
  if (staged_->iteration != iteration) staged_->stage(maker_, iteration);
  cuda::AsyncUploader::Upload mine = std::move(staged_->upload);
  staged_->iteration = -1;
  staged_->uploader.finish(mine);
  if (next_iteration >= 0) staged_->stage(maker_, next_iteration);
  LabeledBatch batch;
  batch.inputs = mine.tensors[0];
  batch.targets = mine.tensors[1];
  batch.aux = mine.tensors[2];
  batch.labels = mine.tensors[3];
  return batch;
#else
  static_cast<void>(next_iteration);
  return maker_.make(iteration);
#endif
}

}  // namespace tandem::models
