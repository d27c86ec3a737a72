// Models, data and training loops shared by the Reducer suites (MPI ranks and thread
// ranks): a tiny GAN trained in each MMGeneration style, a two-layer model for no_sync
// micro-batches, and the checks against the single-process oracle.
//
// Contract: every rank gets the same model (fixed seeds) and its slice of a global batch
// of kGlobalBatch rows (divisible by 1-4 ranks). train_gan with Style::none and a null
// group is the oracle: one process on the whole batch. require_close and
// require_bitwise_equal use Catch2 assertions: call them on the test's main thread.
#pragma once

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/frozen_scope.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "runtime/rng.h"

namespace tandem::testing {

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2, 3 and 4 ranks

// Rows of a global batch that belong to `rank` of `size`.
// Whether the Reducer's bucket memory is at most its parameters' bytes plus the alignment
// padding its flat storage may add (flat_layout.h), whatever its phases.
inline bool buckets_within_parameters(const Reducer& reducer) {
  size_t padding = 0;
  for (const Variable& p : reducer.parameters())
    padding += static_cast<size_t>(FlatLayout::kAlign - 1) * dtype_size(p.dtype());
  return reducer.bucket_bytes() <= reducer.parameter_bytes() + padding;
}

inline Tensor slice_rows(const Tensor& global, int rank, int size) {
  int64_t rows = global.size(0) / size;
  return global.narrow_rows(rank * rows, rows).clone();
}

inline Tensor random_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  Generator gen(seed);
  fill_normal(t, 0.0, 1.0, gen);
  return t;
}

// A small GAN: G 4 -> 8 -> 3, D 3 -> 8 (-> 8 extra, dynamic) -> 1.
class TinyGan : public DataParallelModel {
 public:
  TinyGan(uint64_t seed, bool dynamic) : dynamic_(dynamic) {
    Generator gen(seed);
    generator = register_module(
        "generator", std::make_shared<nn::Sequential>(
                         std::make_shared<nn::Linear>(4, 8, true, gen), std::make_shared<nn::ReLU>(),
                         std::make_shared<nn::Linear>(8, 3, true, gen), std::make_shared<nn::Tanh>()));
    discriminator = register_module("discriminator", std::make_shared<Discriminator>(gen));
  }
  std::string type_name() const override { return "TinyGan"; }

  struct Discriminator : nn::Module {
    explicit Discriminator(Generator& gen) {
      fc1 = register_module("fc1", std::make_shared<nn::Linear>(3, 8, true, gen));
      extra = register_module("extra", std::make_shared<nn::Linear>(8, 8, true, gen));
      fc2 = register_module("fc2", std::make_shared<nn::Linear>(8, 1, true, gen));
    }
    Variable run(const Variable& x, bool use_extra) {
      Variable h = leaky_relu(fc1->forward(x), 0.2);
      if (use_extra) h = relu(extra->forward(h));
      return fc2->forward(h);
    }
    std::shared_ptr<nn::Linear> fc1, extra, fc2;
  };

  bool uses_extra(int iteration) const { return dynamic_ && (iteration / 2) % 2 == 1; }

  std::shared_ptr<nn::Sequential> generator;
  std::shared_ptr<Discriminator> discriminator;

 private:
  bool dynamic_;
};

// whole_no_negotiate (negotiate_grads false) is not among kDistributedStyles: it matches the
// oracle only where every backward's optimizer steps parameters it reaches (a static GAN).
enum class Style {
  whole,
  whole_find_unused,
  separate,
  separate_find_unused,
  whole_explicit_prepare,
  whole_no_negotiate,
  none
};

inline constexpr Style kDistributedStyles[] = {Style::whole, Style::whole_find_unused, Style::separate,
                                               Style::separate_find_unused, Style::whole_explicit_prepare};

inline const char* style_name(Style s) {
  switch (s) {
    case Style::whole:
      return "whole, find_unused_parameters=false";
    case Style::whole_find_unused:
      return "whole, find_unused_parameters=true";
    case Style::separate:
      return "separate, find_unused_parameters=false";
    case Style::separate_find_unused:
      return "separate, find_unused_parameters=true";
    case Style::whole_explicit_prepare:
      return "whole, explicit prepare_for_backward";
    case Style::whole_no_negotiate:
      return "whole, negotiate_grads=false";
    case Style::none:
      return "one process";
  }
  return "";
}

// How the G step's backward treats D: full (the backward reaches D and writes its
// gradients), inputs (loss_g.backward({.inputs = G's parameters})), update_params
// (OptimWrapper::update_params, which scopes the same way) or frozen (D frozen by hand in
// a FrozenScope around the G step's forward and backward).
enum class GStep { full, inputs, update_params, frozen };

inline const char* g_step_name(GStep g) {
  switch (g) {
    case GStep::full:
      return "G step reaching D";
    case GStep::inputs:
      return "G step given G's parameters as inputs";
    case GStep::update_params:
      return "G step through update_params";
    case GStep::frozen:
      return "G step with D frozen by hand";
  }
  return "";
}

// What train_gan saw of its G steps: whether each left D's gradients exactly as the D step
// before it did, and the bytes the G steps synchronised (rank-local Reducers' counts).
struct GStepReport {
  bool d_grads_untouched = true;
  uint64_t g_step_bytes = 0;
  std::vector<const Reducer*> reducers;  // set by train_gan
  uint64_t total_bytes() const {
    uint64_t sum = 0;
    for (const Reducer* r : reducers) sum += r->total_bytes();
    return sum;
  }
};

inline std::vector<Tensor> grads_of(const std::vector<Variable>& params) {
  std::vector<Tensor> out;
  for (const Variable& p : params) out.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return out;
}

inline bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && std::memcmp(a[i].raw_data(), b[i].raw_data(), a[i].bytes()) != 0) return false;
  }
  return a.size() == b.size();
}

// One D update then one G update, MMGeneration style. `prepare` (may be null) is called
// before each backward for the explicit style.
inline void gan_step(TinyGan& gan, const Tensor& real, const Tensor& z, int iteration,
                     OptimWrapperDict& wrappers, Reducer* prepare, GStep g_step = GStep::full,
                     GStepReport* report = nullptr) {
  bool extra = gan.uses_extra(iteration);
  Variable fake = gan.generator->forward(Variable(z));
  Variable loss_d = mean(softplus(gan.discriminator->run(fake.detach(), extra))) +
                    mean(softplus(-gan.discriminator->run(Variable(real), extra)));
  wrappers["discriminator"].zero_grad();
  if (prepare) prepare->prepare_for_backward(loss_d);
  wrappers["discriminator"].backward(loss_d);
  wrappers["discriminator"].step();

  const std::vector<Tensor> d_grads = grads_of(gan.discriminator->parameters());
  const uint64_t bytes_before = report != nullptr ? report->total_bytes() : 0;
  std::optional<FrozenScope> frozen;
  if (g_step == GStep::frozen) frozen.emplace(*gan.discriminator);
  Variable loss_g = mean(softplus(-gan.discriminator->run(fake, extra)));
  OptimWrapper& opt_g = wrappers["generator"];
  opt_g.zero_grad();
  if (g_step == GStep::full || g_step == GStep::frozen) {
    if (prepare) prepare->prepare_for_backward(loss_g);
    opt_g.backward(loss_g);
    opt_g.step();
  } else if (g_step == GStep::inputs) {
    if (prepare) prepare->prepare_for_backward({loss_g}, gan.generator->parameters());
    loss_g.backward({.inputs = gan.generator->parameters()});
    opt_g.step();
  } else {
    if (prepare) prepare->prepare_for_backward({loss_g}, opt_g.backward_inputs());
    opt_g.update_params(loss_g);
  }
  frozen.reset();
  if (report == nullptr) return;
  report->g_step_bytes += report->total_bytes() - bytes_before;
  if (!same_bits(grads_of(gan.discriminator->parameters()), d_grads)) report->d_grads_untouched = false;
}

inline OptimWrapperDict make_wrappers(TinyGan& gan) {
  OptimWrapperDict dict;
  dict.add("generator",
           std::make_shared<OptimWrapper>(std::make_shared<optim::Adam>(
               gan.generator->parameters(), optim::AdamOptions{.lr = 1e-2, .betas = {0.5, 0.999}})));
  dict.add("discriminator",
           std::make_shared<OptimWrapper>(std::make_shared<optim::Adam>(
               gan.discriminator->parameters(), optim::AdamOptions{.lr = 1e-2, .betas = {0.5, 0.999}})));
  return dict;
}

inline std::vector<Tensor> parameter_values(const nn::Module& model) {
  std::vector<Tensor> out;
  for (const Variable& p : model.parameters()) out.push_back(p.data().clone());
  return out;
}

// Trains `iterations` GAN steps in the given style on this rank's slices of `group` (or,
// for Style::none, on the whole global batch) on `device`, and returns the final parameters
// (on the CPU).
inline std::vector<Tensor> train_gan(Style style, bool dynamic, int iterations,
                                     const std::shared_ptr<dist::ProcessGroup>& group,
                                     Device device = Device::cpu(), GStep g_step = GStep::full,
                                     GStepReport* report = nullptr) {
  auto gan = std::make_shared<TinyGan>(/*seed=*/7, dynamic);
  gan->to(device);
  OptimWrapperDict wrappers = make_wrappers(*gan);
  DdpOptions options;
  options.reducer.find_unused_parameters =
      style == Style::whole_find_unused || style == Style::separate_find_unused;
  options.reducer.negotiate_grads = style != Style::whole_no_negotiate;
  std::unique_ptr<DistributedDataParallel> whole;
  std::unique_ptr<SeparateDistributedDataParallel> separate;
  if (style == Style::whole || style == Style::whole_find_unused || style == Style::whole_explicit_prepare ||
      style == Style::whole_no_negotiate) {
    whole = std::make_unique<DistributedDataParallel>(gan, group, options);
  } else if (style != Style::none) {
    separate = std::make_unique<SeparateDistributedDataParallel>(gan, group, options);
  }
  Reducer* prepare = style == Style::whole_explicit_prepare ? &whole->reducer() : nullptr;
  if (report != nullptr && whole) report->reducers = {&whole->reducer()};
  if (report != nullptr && separate)
    report->reducers = {&separate->reducer("discriminator"), &separate->reducer("generator")};
  for (int it = 0; it < iterations; ++it) {
    Tensor real = random_tensor({kGlobalBatch, 3}, 1000 + it);
    Tensor z = random_tensor({kGlobalBatch, 4}, 2000 + it);
    if (style != Style::none) {
      real = slice_rows(real, group->rank(), group->size());
      z = slice_rows(z, group->rank(), group->size());
    }
    gan_step(*gan, real.to(device), z.to(device), it, wrappers, prepare, g_step, report);
  }
  std::vector<Tensor> values;
  for (const Tensor& p : parameter_values(*gan)) values.push_back(p.to(Device::cpu()));
  return values;
}

// A model of two linear layers; micro_batch_loss uses "side" in micro-batch 0 only.
inline std::shared_ptr<DataParallelModel> make_side_model() {
  auto m = std::make_shared<DataParallelModel>();
  Generator gen(11);
  m->register_module("fc", std::make_shared<nn::Linear>(5, 2, true, gen));
  m->register_module("side", std::make_shared<nn::Linear>(5, 2, true, gen));
  return m;
}

inline Variable micro_batch_loss(DataParallelModel& m, const Tensor& x, int micro) {
  auto fc = std::dynamic_pointer_cast<nn::Linear>(m.named_children()[0].second);
  auto side = std::dynamic_pointer_cast<nn::Linear>(m.named_children()[1].second);
  Variable out = fc->forward(Variable(x));
  if (micro == 0) out = out + side->forward(Variable(x));
  return mean(square(out));
}

inline void require_close(const std::vector<Tensor>& got, const std::vector<Tensor>& expected, double rel) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    auto g = got[i].to_vector(), e = expected[i].to_vector();
    REQUIRE(g.size() == e.size());
    for (size_t k = 0; k < g.size(); ++k) {
      INFO("parameter " << i << " element " << k);
      REQUIRE(g[k] == Approx(e[k]).epsilon(rel).margin(1e-6));
    }
  }
}

// Every rank's tensors (on the CPU) equal rank 0's, bit for bit; collective over `group`
// (a CPU group: the tensors are broadcast as they are).
inline void require_replicas_identical(const std::vector<Tensor>& params, dist::ProcessGroup& group) {
  for (const Tensor& p : params) {
    Tensor rank0 = p.clone();
    group.broadcast(rank0, 0, "replica check")->wait();
    REQUIRE(std::memcmp(p.raw_data(), rank0.raw_data(), p.bytes()) == 0);
  }
}

inline void require_bitwise_equal(const std::vector<Tensor>& got, const std::vector<Tensor>& expected) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(got[i].bytes() == expected[i].bytes());
    REQUIRE(std::memcmp(got[i].raw_data(), expected[i].raw_data(), got[i].bytes()) == 0);
  }
}

}  // namespace tandem::testing
