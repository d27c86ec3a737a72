#include "models/train/graphed_gan_step.h"

#include <sstream>

#if TANDEM_HAVE_CUDA
#include "runtime/cuda/cuda_graph.h"
#endif

namespace tandem::models {

namespace {

void describe(std::ostringstream& os, const char* name, const Tensor& t) {
  if (t.defined()) os << " " << name << shape_str(t.shape());
}

}  // namespace

std::string step_graph_key(const GanModel& model, const Batch& batch) {
  std::ostringstream os;
  const std::string structure = model.step_key();
  os << model.type_name() << (structure.empty() ? "" : " " + structure);
  describe(os, "real", batch.inputs);
  describe(os, "noise", batch.targets);
  describe(os, "mix", batch.aux);
  return os.str();
}

#if TANDEM_HAVE_CUDA

struct GraphedGanStep::State {
  WrappedGan& wrapped;
  StepGraphPolicy policy;
  std::ostream* log;
  std::unique_ptr<cuda::CudaGraph> graph;
  Batch inputs;          // the static buffers the graph reads
  LogVars captured_log;  // the capture's log, its values NaN until read
};

GraphedGanStep::GraphedGanStep(WrappedGan& wrapped, int64_t warmup, std::ostream* log)
    : state_(std::make_unique<State>(State{wrapped, StepGraphPolicy(warmup), log, nullptr, {}, {}})) {
  const std::vector<Variable> params = wrapped.model().parameters();
  TANDEM_CHECK(!params.empty() && params.front().device().is_cuda(),
               "--cuda-graphs: the model's parameters are not on a CUDA device");
}

GraphedGanStep::~GraphedGanStep() = default;

const StepGraphPolicy& GraphedGanStep::policy() const { return state_->policy; }

namespace {

// Captured collectives are not watched by their group: a replay stuck on a rank that is
// gone must still end the job at the group's timeout, as the eager step's would.
void wait_for_launch(cuda::CudaGraph& graph, WrappedGan& wrapped, int64_t iteration) {
  const std::vector<const Reducer*> reducers = wrapped.reducers();
  if (reducers.empty()) return;  // nothing to wait for that could hang: the log read waits
  dist::ProcessGroup& group = reducers.front()->group();
  if (graph.wait_for(group.timeout())) return;
  dist::abort_on_timeout(
      Error(__FILE__, __LINE__,
            dist::timeout_message(
                "the captured training step (CUDA graph) of iteration " + std::to_string(iteration),
                group.timeout(), group.rank(), group.size(),
                "its NCCL collectives did not complete; another rank may have stopped")));
}

Tensor clone_defined(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }
void copy_defined(Tensor& to, const Tensor& from) {
  if (to.defined()) to.copy_(from);  // on the compute stream: before the launch that reads it
}

}  // namespace

LogVars GraphedGanStep::step(const Batch& batch, int64_t iteration) {
  State& s = *state_;
  const StepMode mode = s.policy.next(step_graph_key(s.wrapped.model(), batch));
  if (s.log != nullptr && !s.policy.note().empty())
    *s.log << s.policy.note() << ", at iteration " << iteration << "\n";
  switch (mode) {
    case StepMode::eager:
      s.graph.reset();  // before the step: a new phase may evict the buckets the graph used
      s.inputs = {};
      return s.wrapped.train_step(batch);
    case StepMode::capture: {
      s.graph.reset();
      s.inputs = {clone_defined(batch.inputs), clone_defined(batch.targets), clone_defined(batch.aux)};
      s.graph = std::make_unique<cuda::CudaGraph>(s.inputs.inputs.device().index);
      s.graph->capture([&] { s.captured_log = s.wrapped.train_step(s.inputs); });
      s.graph->launch();  // the captured iteration itself
      wait_for_launch(*s.graph, s.wrapped, iteration);
      return s.wrapped.model().read_device_log(s.captured_log);
    }
    case StepMode::replay:
      copy_defined(s.inputs.inputs, batch.inputs);
      copy_defined(s.inputs.targets, batch.targets);
      copy_defined(s.inputs.aux, batch.aux);
      s.graph->launch();
      wait_for_launch(*s.graph, s.wrapped, iteration);
      return s.wrapped.model().read_device_log(s.captured_log);
  }
  return {};
}

#else

struct GraphedGanStep::State {
  StepGraphPolicy policy;
};

GraphedGanStep::GraphedGanStep(WrappedGan&, int64_t, std::ostream*) {
  TANDEM_FAIL("--cuda-graphs: this build of tandem has no CUDA");
}
GraphedGanStep::~GraphedGanStep() = default;
const StepGraphPolicy& GraphedGanStep::policy() const { return state_->policy; }
LogVars GraphedGanStep::step(const Batch&, int64_t) {
  TANDEM_FAIL("--cuda-graphs: this build of tandem has no CUDA");
}

#endif

}  // namespace tandem::models
