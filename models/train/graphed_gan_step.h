// GraphedGanStep: WrappedGan::train_step through CUDA graphs (tandem-train --cuda-graphs).
//
// Contract:
// - step(batch, iteration) does what WrappedGan::train_step(batch) does, with bit for bit
//   the same parameters, optimizer state, gradients and log values, but as
//   StepGraphPolicy decides from step_graph_key(model, batch): eagerly, captured into a
//   CUDA graph (runtime/cuda/cuda_graph.h) and launched, or by replaying that graph.
//   The whole step is captured: both forwards, both backwards, the buffer broadcast, the
//   Reducer's bucket packing, its NCCL allreduces and unpacking, both optimizer steps.
//   Host work (the engine's graph walk, the Reducer's phase choice) runs once, at the
//   capture; the Reducer's agreement is not run there (reducer.h says why that is safe).
// - Static shapes: at each capture the batch's tensors are copied into buffers of their
//   own, allocated outside the graph and kept with it; before each replay the iteration's
//   batch is copied into them on the compute stream. A batch of other shapes (a last
//   partial batch) or another model structure (a dynamic model's phases, a progressive
//   GAN's stage or fade-in) is another key: the graph is discarded, the step runs
//   eagerly, and is captured again once stable; each capture and discard is one line on
//   `log` (rank 0's output) when given.
// - Randomness: the noise and the interpolation coefficients come with the batch, drawn
//   on the host from (seed, rank, iteration) (batch_maker.h), so nothing random runs inside
//   the graph and each replay uses its iteration's own numbers.
// - The log is read after each launch from the tensors the graph wrote
//   (GanModel::read_device_log): it waits for the device, as the eager step's .item()
//   does. That wait has the process group's timeout: a launch not done by then (a rank
//   gone, its collectives never matched) ends the job through abort_on_timeout, with a
//   message naming the captured step and its iteration.
// - parse_train_options refuses --cuda-graphs with what a captured step cannot replay
//   (train_options.h).
// - CUDA builds only: elsewhere the constructor is an Error naming --cuda-graphs. The
//   wrapped GAN (its optimizers and Reducers) must outlive this object.
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "models/train/step_graph_policy.h"
#include "models/train/train_options.h"
#include "models/wrapped_gan.h"

namespace tandem::models {

std::string step_graph_key(const GanModel& model, const Batch& batch);

class GraphedGanStep {
 public:
  explicit GraphedGanStep(WrappedGan& wrapped, int64_t warmup = kDefaultGraphWarmup,
                          std::ostream* log = nullptr);
  ~GraphedGanStep();
  GraphedGanStep(const GraphedGanStep&) = delete;
  GraphedGanStep& operator=(const GraphedGanStep&) = delete;

  LogVars step(const Batch& batch, int64_t iteration);
  const StepGraphPolicy& policy() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::models
