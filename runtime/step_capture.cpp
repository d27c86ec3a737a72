#include "runtime/step_capture.h"

#include "runtime/error.h"

namespace tandem {

namespace {
thread_local StepCapture* t_capture = nullptr;
}  // namespace

StepCapture* active_capture() { return t_capture; }

void begin_capture(StepCapture* capture) {
  TANDEM_CHECK(t_capture == nullptr,
               "a step capture is already under way on this thread: captures do not nest");
  t_capture = capture;
}

void end_capture() { t_capture = nullptr; }

}  // namespace tandem
