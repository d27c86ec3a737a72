// CudaGraph: one step's device work captured once and replayed. CUDA builds only.
//
// Contract:
// - capture(fn) runs fn's host code once on this thread while the device work it queues
//   on compute_stream() (stream.h) is captured, on a private stream, into a graph (capture
//   mode thread-local: other threads' CUDA calls are unaffected). Nothing of fn runs on
//   the device yet. Meanwhile step_capture() is this thread's active_capture()
//   (runtime/step_capture.h), and the caching allocator serves the thread from a private
//   pool (cuda_memory.h) that lives as long as the graph: the addresses the graph uses
//   stay valid for every replay. fn must not read the device on the host (no .item(), no
//   copy between host and device: an Error naming the capture, cuda_memory.h) nor run
//   host collectives. A throw from fn ends the capture, discards the graph, and is
//   rethrown.
// - launch() runs the captured work on the compute stream (the legacy default stream,
//   ordered after whatever was queued before it) and returns without waiting. The first
//   launch after a capture performs the captured step itself; each later one is a replay,
//   preceded by the StepCapture's launch callbacks with advance = true (the host state the
//   step keeps, such as step counts, moves on one step, and the per-step constants the
//   graph reads from device memory are uploaded on the compute stream); the first launch
//   runs them with advance = false (upload only). wait_for(timeout) waits for the latest
//   launch with a deadline: captured collectives are not watched by their process group,
//   so whoever replays them bounds the wait (GraphedGanStep ends the job at the group's
//   timeout, naming the replay).
// - Everything the graph reads or writes outside its private pool (parameters, optimizer
//   state, bucket buffers, the static input buffers the caller copies each step's inputs
//   into before launch) must stay allocated while the graph exists. Destruction waits for
//   the compute stream, then frees the graph and releases its pool.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <functional>
#include <memory>

#include "runtime/step_capture.h"

namespace tandem::cuda {

class CudaStream;

class CudaGraph {
 public:
  explicit CudaGraph(int device);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void capture(const std::function<void()>& fn);
  void launch();
  // Waits for the latest launch to finish, polling: false when `timeout` passed first.
  bool wait_for(std::chrono::milliseconds timeout);
  bool captured() const { return exec_ != nullptr; }
  int64_t launches() const { return launches_; }
  StepCapture& step_capture() { return *capture_; }

 private:
  void discard();

  int device_;
  std::unique_ptr<CudaStream> stream_;
  cudaEvent_t done_ = nullptr;            // recorded after each launch
  std::unique_ptr<StepCapture> capture_;  // kept alive with the graph: what it reads lives here
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int pool_ = 0;  // the private memory pool; 0: none
  int64_t launches_ = 0;
};

}  // namespace tandem::cuda
