// CUDA graphs (runtime/cuda/cuda_graph.h) on one GPU, without MPI: a captured optimizer step
// replays bit for bit as eager steps do (the learning rate changed between replays, the
// multi-tensor descriptor cache churned by other updates), a capture's memory is not handed
// out while the graph lives, and a step that reads the device on the host is refused.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "autograd/optim.h"
#include "kernels/elementwise.h"
#include "runtime/cuda/cuda_graph.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

std::vector<Variable> make_params(uint64_t seed) {
  std::vector<Variable> params;
  for (int64_t n : {5, 1000, 4099}) params.emplace_back(on_gpu(random_cpu({n}, DType::f32, seed + n)), true);
  return params;
}

void set_grads(std::vector<Variable>& params, uint64_t seed) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_grad(on_gpu(random_cpu(params[i].shape(), DType::f32, seed + i)));
}

}  // namespace

TEST_CASE("a captured Adam step replays bitwise as eager steps", "[cuda][cuda-graphs]") {
  std::vector<Variable> eager = make_params(1), graphed = make_params(1);
  optim::AdamW eager_opt(eager, {.lr = 1e-2, .weight_decay = 0.1});
  optim::AdamW graph_opt(graphed, {.lr = 1e-2, .weight_decay = 0.1});
  set_grads(eager, 7);
  set_grads(graphed, 7);
  eager_opt.step();  // the warm-up: the moments are made eagerly
  graph_opt.step();
  // Other updates between replays rewrite the shared descriptor cache (16 entries).
  std::vector<std::vector<Variable>> others;
  std::vector<std::unique_ptr<optim::Adam>> other_opts;
  for (int k = 0; k < 20; ++k) {
    others.push_back({Variable(on_gpu(random_cpu({int64_t{8} + k}, DType::f32, 100 + k)), true)});
    set_grads(others.back(), 200 + k);
    other_opts.push_back(std::make_unique<optim::Adam>(others.back()));
  }
  cuda::CudaGraph graph(0);
  graph.capture([&] { graph_opt.step(); });
  CHECK(graph_opt.step_count(0) == 2);
  const std::vector<double> rates = {1e-2, 3e-3, 3e-3, 7e-4, 1e-4};
  for (size_t k = 0; k < rates.size(); ++k) {
    eager_opt.set_lr(rates[k]);
    graph_opt.set_lr(rates[k]);
    eager_opt.step();
    graph.launch();  // the first launch is the captured step, the others replays
    for (auto& opt : other_opts) opt->step();
  }
  CHECK(graph.launches() == 5);
  CHECK(graph_opt.step_count(0) == eager_opt.step_count(0));
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("parameter " << i);
    CHECK(graphed[i].data().to_vector() == eager[i].data().to_vector());
  }
}

TEST_CASE("a captured Adam step after the step's temporaries replays bitwise as eager steps",
          "[cuda][cuda-graphs]") {
  // As in a training step, a temporary (here the size of the step's constants) is made and
  // freed in the capture before the update: the constants must not share its memory, which
  // each replay writes again after the host wrote them.
  std::vector<Variable> eager = make_params(4), graphed = make_params(4);
  optim::Adam eager_opt(eager, {.lr = 2e-4, .betas = {0.5, 0.999}});
  optim::Adam graph_opt(graphed, {.lr = 2e-4, .betas = {0.5, 0.999}});
  set_grads(eager, 11);
  set_grads(graphed, 11);
  eager_opt.step();
  graph_opt.step();
  cuda::CudaGraph graph(0);
  graph.capture([&] {
    {
      Tensor temporary = kernels::scale(graphed[0].grad(), 3.0);  // 5 floats: a block the 3 doubles fit
    }
    graph_opt.step();
  });
  for (int k = 0; k < 4; ++k) {
    eager_opt.step();
    graph.launch();
  }
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("parameter " << i);
    CHECK(graphed[i].data().to_vector() == eager[i].data().to_vector());
  }
}

TEST_CASE("memory a capture used is not handed out while its graph lives", "[cuda][cuda-graphs]") {
  Tensor x = on_gpu(random_cpu({1 << 16}, DType::f32, 3));
  Tensor out = Tensor::zeros({1 << 16}, DType::f32, Device::cuda(0));
  void* scratch = nullptr;
  auto graph = std::make_unique<cuda::CudaGraph>(0);
  graph->capture([&] {
    Tensor twice = kernels::scale(x, 2.0);  // freed during the capture; replays write it again
    scratch = twice.raw_data();
    out.copy_(kernels::add_scalar(twice, 1.0));
  });
  Tensor other = Tensor::empty({1 << 16}, DType::f32, Device::cuda(0));
  CHECK(other.raw_data() != scratch);  // the shared cache would give the same block back
  graph->launch();
  graph->launch();
  std::vector<double> want = kernels::add_scalar(kernels::scale(x, 2.0), 1.0).to_vector();
  CHECK(out.to_vector() == want);
  graph.reset();  // its pool returns to the shared cache
  Tensor again = Tensor::empty({1 << 16}, DType::f32, Device::cuda(0));
  CHECK(again.defined());
}

TEST_CASE("a captured step that reads the device on the host is refused, and nothing stays captured",
          "[cuda][cuda-graphs]") {
  Tensor x = on_gpu(random_cpu({16}, DType::f32, 5));
  cuda::CudaGraph graph(0);
  CHECK_THROWS_WITH(graph.capture([&] { (void)kernels::scale(x, 2.0).to_vector(); }),
                    Catch::Contains("inside a CUDA graph capture"));
  CHECK_FALSE(graph.captured());
  CHECK(active_capture() == nullptr);
  // The GPU is usable eagerly afterwards.
  CHECK(kernels::scale(x, 2.0).to_vector() == kernels::add(x, x).to_vector());
}
