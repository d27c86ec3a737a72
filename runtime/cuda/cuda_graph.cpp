#include "runtime/cuda/cuda_graph.h"

#include <algorithm>
#include <thread>

#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/stream.h"
#include "runtime/cuda_check.h"

namespace tandem::cuda {

CudaGraph::CudaGraph(int device) : device_(device) {}

CudaGraph::~CudaGraph() {
  discard();
  if (done_ != nullptr) cudaEventDestroy(done_);
}

void CudaGraph::discard() {
  cudaSetDevice(device_);
  if (exec_ != nullptr) {
    cudaStreamSynchronize(cudaStreamLegacy);  // no launch may still use the pool
    cudaGraphExecDestroy(exec_);
  }
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  capture_.reset();  // after the executable: it held what the graph reads
  if (pool_ != 0) release_private_cuda_pool(pool_);
  pool_ = 0;
  launches_ = 0;
}

void CudaGraph::capture(const std::function<void()>& fn) {
  discard();
  TANDEM_CHECK_CUDA(cudaSetDevice(device_));
  if (!stream_) stream_ = std::make_unique<CudaStream>();
  capture_ = std::make_unique<StepCapture>();
  pool_ = begin_private_cuda_pool();
  // Work queued before the capture must be done before the stream's captured work could
  // run: the graph is launched on the legacy stream later, so that order holds by itself.
  cudaGraph_t graph = nullptr;
  try {
    ComputeStreamScope on_capture_stream(stream_->get());
    ActiveCaptureScope active(capture_.get());
    TANDEM_CHECK_CUDA(cudaStreamBeginCapture(stream_->get(), cudaStreamCaptureModeThreadLocal));
    try {
      fn();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream_->get(), &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    const cudaError_t rc = cudaStreamEndCapture(stream_->get(), &graph);
    TANDEM_CHECK(rc == cudaSuccess, "CUDA graph capture of the step failed at its end: "
                                        << cudaGetErrorString(rc)
                                        << " (a call during the step was not allowed in a capture, or work "
                                           "forked to another stream was not joined back)");
  } catch (...) {
    end_private_cuda_pool();
    discard();
    throw;
  }
  end_private_cuda_pool();
  graph_ = graph;
  TANDEM_CHECK_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraph::launch() {
  TANDEM_CHECK(exec_ != nullptr, "CudaGraph::launch: nothing captured");
  TANDEM_CHECK_CUDA(cudaSetDevice(device_));
  capture_->run_launch_callbacks(/*advance=*/launches_ > 0);
  TANDEM_CHECK_CUDA(cudaGraphLaunch(exec_, cudaStreamLegacy));
  if (done_ == nullptr) TANDEM_CHECK_CUDA(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  TANDEM_CHECK_CUDA(cudaEventRecord(done_, cudaStreamLegacy));
  ++launches_;
}

bool CudaGraph::wait_for(std::chrono::milliseconds timeout) {
  if (done_ == nullptr) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaSuccess) return true;
    TANDEM_CHECK(rc == cudaErrorNotReady, "a launch of a CUDA graph failed: " << cudaGetErrorString(rc));
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace tandem::cuda
