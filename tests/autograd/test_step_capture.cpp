// The host side of a captured step (runtime/step_capture.h), without a GPU: an optimizer
// step taken inside a capture makes each replay advance the step counts as an eager step
// would, and captures do not nest.
#include <catch2/catch.hpp>
#include <vector>

#include "autograd/optim.h"
#include "runtime/step_capture.h"

using namespace tandem;

TEST_CASE("captures do not nest and end with their scope", "[step-capture]") {
  StepCapture outer, inner;
  {
    ActiveCaptureScope active(&outer);
    CHECK(active_capture() == &outer);
    CHECK_THROWS_WITH(begin_capture(&inner), Catch::Contains("captures do not nest"));
  }
  CHECK(active_capture() == nullptr);
}

TEST_CASE("replays of a captured optimizer step advance its step counts", "[step-capture][optim]") {
  Variable a(Tensor::from_values({2}, {1, 2}), true), b(Tensor::from_values({1}, {3}), true),
      idle(Tensor::from_values({1}, {4}), true);
  optim::Adam opt({a, b, idle}, {.lr = 0.1});
  a.set_grad(Tensor::from_values({2}, {0.5, -0.5}));
  b.set_grad(Tensor::from_values({1}, {1}));
  opt.step();  // eager: a and b at step 1, idle (no gradient) at 0
  const int64_t taken = optim::steps_taken_on_this_thread();
  StepCapture capture;
  {
    ActiveCaptureScope active(&capture);
    opt.step();  // the capture's step itself: host state advances once, now
  }
  CHECK(opt.step_count(0) == 2);
  CHECK(optim::steps_taken_on_this_thread() == taken + 1);
  capture.run_launch_callbacks(/*advance=*/false);  // the first launch: the captured step
  CHECK(opt.step_count(0) == 2);
  for (int replay = 0; replay < 3; ++replay) capture.run_launch_callbacks(/*advance=*/true);
  CHECK(opt.step_count(0) == 5);
  CHECK(opt.step_count(1) == 5);
  CHECK(opt.step_count(2) == 0);  // not updated at the capture, not by its replays
  CHECK(optim::steps_taken_on_this_thread() == taken + 4);
}
