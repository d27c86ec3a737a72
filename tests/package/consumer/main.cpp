// The package tests' consumer program: the README's "User code" block, compiled as it
// stands (the test extracts it into readme_user_code.cpp), then the README's main with a
// check: after training, every rank holds bitwise the same parameters as rank 0, and
// training moved them. Exits 1, naming the first parameter that differs, otherwise. Built
// with the models (CONSUMER_USES_TRAIN), it also uses the toolkit tandem::training through tandem::tandem.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "readme_user_code.cpp"

#if CONSUMER_USES_TRAIN
#include "models/training/checkpoint.h"
#include "models/training/ema_weights.h"
#endif

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::stoi(argv[1]) : 50;
  dist::DistributedContext ctx;
  const auto& world = ctx.world();
  auto gan = std::make_shared<MyGan>();
  std::vector<Tensor> initial;
  for (const Variable& p : gan->parameters()) initial.push_back(p.data().clone());

  train(gan, world, steps);

  int failures = 0;
  bool moved = false;
  int64_t values = 0;
  size_t i = 0;
  for (const auto& [name, p] : gan->named_parameters()) {
    const Tensor& mine = p.data();
    Tensor all = Tensor::empty({world->size() * mine.numel()}, mine.dtype());
    world->allgather_flat(all, mine, "parameter check")->wait();
    const size_t bytes = mine.bytes();
    for (int r = 1; r < world->size(); ++r) {
      if (std::memcmp(all.data<float>(), all.data<float>() + r * mine.numel(), bytes) != 0) {
        std::fprintf(stderr, "consumer: rank %d: parameter %s differs between rank 0 and rank %d\n",
                     world->rank(), name.c_str(), r);
        ++failures;
      }
    }
    moved = moved || std::memcmp(mine.data<float>(), initial[i].data<float>(), bytes) != 0;
    values += mine.numel();
    ++i;
  }
  if (!moved) {
    std::fprintf(stderr, "consumer: rank %d: training left every parameter as it was\n", world->rank());
    ++failures;
  }
#if CONSUMER_USES_TRAIN
  // tandem::tandem links the toolkit tandem::training: a checkpoint of the model and a moving average of it.
  tandem::training::EmaWeights ema(gan->parameters(), 0.999);
  tandem::training::Checkpoint checkpoint;
  checkpoint.add_module("model", *gan);
  checkpoint.add_ema("ema", ema);
  if (checkpoint.tensors().size() != gan->state_dict().size() + ema.tensors().size()) {
    std::fprintf(stderr, "consumer: rank %d: the checkpoint does not hold every tensor\n", world->rank());
    ++failures;
  }
#endif
  if (world->size() < 2) {
    std::fprintf(stderr, "consumer: run it at 2 ranks or more (got %d)\n", world->size());
    ++failures;
  }
  if (failures == 0 && world->rank() == 0) {
    std::printf("consumer: %zu parameters (%lld values) bitwise identical on %d ranks after %d steps\n", i,
                static_cast<long long>(values), world->size(), steps);
  }
  return failures == 0 ? 0 : 1;
}
