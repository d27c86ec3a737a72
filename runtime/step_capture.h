// What a captured step leaves to the host: the registry that a step graph (CUDA graphs,
// runtime/cuda/cuda_graph.h) hands to the code it captures. Device-agnostic, so that the
// layers above (optimizers, the Reducer, the models) can take part without CUDA headers.
//
// Contract:
// - A StepCapture is active on one thread between begin_capture(&c) and end_capture(); at
//   most one per thread. active_capture() returns it (nullptr when none): code that runs
//   while a step is captured asks it, and then neither reads device values on the host
//   (no .item(), no synchronising copy) nor issues host-side collectives.
// - Capture runs the step's host code once; replays run only its device work. Host state
//   that the step advances (an optimizer's step count, a Reducer's backward count) is
//   advanced for each replay by the callbacks registered with on_launch(fn): the replayer
//   calls run_launch_callbacks(advance) before each launch of the graph, advance = false
//   for the first launch after the capture (the capture already advanced the host state)
//   and true for every replay. Callbacks run in registration order; they may queue small
//   host-to-device copies on the launch stream (the per-step constants a kernel reads
//   from device memory), which then land before the graph that reads them.
// - keep_alive(p) holds p (descriptor arrays, scalars the graph reads) for as long as the
//   StepCapture lives; the replayer keeps the StepCapture alive with its graph.
// - A StepCapture may be made and activated with no device behind it (CPU unit tests):
//   the host bookkeeping is the same.
#pragma once

#include <functional>
#include <memory>
#include <vector>

namespace tandem {

class StepCapture {
 public:
  StepCapture() = default;
  StepCapture(const StepCapture&) = delete;
  StepCapture& operator=(const StepCapture&) = delete;

  using LaunchCallback = std::function<void(bool advance)>;
  void on_launch(LaunchCallback fn) { launch_.push_back(std::move(fn)); }
  void keep_alive(std::shared_ptr<void> p) { held_.push_back(std::move(p)); }
  void run_launch_callbacks(bool advance) const {
    for (const auto& fn : launch_) fn(advance);
  }
  const std::vector<LaunchCallback>& launch_callbacks() const { return launch_; }

 private:
  std::vector<LaunchCallback> launch_;
  std::vector<std::shared_ptr<void>> held_;
};

StepCapture* active_capture();
// Throws if a capture is already active on this thread.
void begin_capture(StepCapture* capture);
void end_capture();

// Activates `capture` for its scope (tests, and the CUDA graph's capture).
class ActiveCaptureScope {
 public:
  explicit ActiveCaptureScope(StepCapture* capture) { begin_capture(capture); }
  ~ActiveCaptureScope() { end_capture(); }
  ActiveCaptureScope(const ActiveCaptureScope&) = delete;
  ActiveCaptureScope& operator=(const ActiveCaptureScope&) = delete;
};

}  // namespace tandem
