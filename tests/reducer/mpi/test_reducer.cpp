// The Reducer and the DDP wrappers at 1-4 ranks, against the single-process oracle:
// N ranks each on a slice of a global batch must end with the parameters of one process
// on the whole batch, and with bitwise identical replicas.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>

#include "autograd/local_backward_scope.h"
#include "autograd/nn.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "reducer/ddp.h"
#include "runtime/dist/process_group.h"
#include "runtime/rng.h"
#include "tests/mpi_world.h"
#include "tests/reducer/counting_group.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

// Rows of a global batch that belong to this rank.
Tensor my_slice(const Tensor& global) { return slice_rows(global, world()->rank(), world()->size()); }

}  // namespace

TEST_CASE("GAN training in every MMGeneration style matches the single-process oracle", "[reducer][oracle]") {
  for (bool dynamic : {false, true}) {
    std::vector<Tensor> reference = train_gan(Style::none, dynamic, 6, nullptr);
    for (Style style : kDistributedStyles) {
      INFO((dynamic ? "dynamic" : "static")
           << " GAN, " << style_name(style) << ", " << world()->size() << " ranks");
      std::vector<Tensor> got = train_gan(style, dynamic, 6, world());
      require_close(got, reference, 1e-5);
      require_replicas_identical(got, *world());
    }
  }
}

TEST_CASE("a G step scoped to G's parameters equals freezing D by hand, bitwise, and leaves D's .grad alone",
          "[reducer][oracle][scoped]") {
  const int iterations = 6;
  size_t g_bytes = 0;
  for (const Variable& p : TinyGan(7, false).generator->parameters()) g_bytes += p.data().bytes();
  for (bool dynamic : {false, true}) {
    for (Style style : {Style::whole, Style::separate, Style::whole_explicit_prepare, Style::none}) {
      const auto group = style == Style::none ? nullptr : world();
      GStepReport by_hand;
      const std::vector<Tensor> frozen =
          train_gan(style, dynamic, iterations, group, Device::cpu(), GStep::frozen, &by_hand);
      for (GStep g_step : {GStep::inputs, GStep::update_params}) {
        INFO((dynamic ? "dynamic" : "static") << " GAN, " << style_name(style) << ", " << g_step_name(g_step)
                                              << ", " << world()->size() << " ranks");
        GStepReport report;
        const std::vector<Tensor> got =
            train_gan(style, dynamic, iterations, group, Device::cpu(), g_step, &report);
        require_bitwise_equal(got, frozen);
        CHECK(report.d_grads_untouched);
        CHECK(report.g_step_bytes == by_hand.g_step_bytes);
        if (style != Style::none) CHECK(report.g_step_bytes == iterations * g_bytes);  // G alone
      }
      // The check can fail: a G step that reaches D writes D's gradients and sends them.
      INFO(style_name(style));
      GStepReport full;
      train_gan(style, dynamic, iterations, group, Device::cpu(), GStep::full, &full);
      CHECK_FALSE(full.d_grads_untouched);
      if (style != Style::none) CHECK(full.g_step_bytes > by_hand.g_step_bytes);
    }
  }
}

// A binary MLP classifier trained MMEngine-style: ddp.train_step(batch, optim_wrapper).
class MlpClassifier : public DataParallelModel {
 public:
  MlpClassifier() {
    Generator gen(21);
    net = register_module("net",
                          std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16, true, gen),
                                                           std::make_shared<nn::Tanh>(),
                                                           std::make_shared<nn::Linear>(16, 1, true, gen)));
  }
  Losses forward_losses(const Batch& batch) override {
    Variable logits = net->forward(Variable(batch.inputs));
    return {{"loss_bce", mean(bce_with_logits(logits, Variable(batch.targets)))}};
  }
  std::shared_ptr<nn::Sequential> net;
};

TEST_CASE("an MLP classifier trained through train_step matches the single-process oracle",
          "[reducer][oracle]") {
  auto run = [](bool distributed) {
    auto model = std::make_shared<MlpClassifier>();
    OptimWrapper wrapper(
        std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9}));
    std::unique_ptr<DistributedDataParallel> ddp;
    if (distributed) ddp = std::make_unique<DistributedDataParallel>(model, world());
    for (int step = 0; step < 6; ++step) {
      Tensor x = random_tensor({kGlobalBatch, 6}, 500 + step);
      Tensor y = Tensor::empty({kGlobalBatch, 1});
      for (int64_t i = 0; i < kGlobalBatch; ++i)
        y.data<float>()[i] = x.at(i * 6) + x.at(i * 6 + 1) > 0 ? 1.0f : 0.0f;
      Batch batch{x, y};
      if (distributed) {
        LogVars log = ddp->train_step(Batch{my_slice(x), my_slice(y)}, wrapper);
        CHECK(log.count("loss_bce") == 1);
        CHECK(log.count("loss") == 1);
      } else {
        auto [total, log] = parse_losses(model->forward_losses(batch));
        wrapper.update_params(total);
      }
    }
    std::vector<Tensor> out;
    for (const Variable& p : model->parameters()) out.push_back(p.data().clone());
    return out;
  };
  std::vector<Tensor> reference = run(false);
  std::vector<Tensor> got = run(true);
  require_close(got, reference, 1e-5);
  require_replicas_identical(got, *world());
}

TEST_CASE("gradient accumulation through OptimWrapper equals one step on the concatenated batch",
          "[reducer][no_sync]") {
  // Two micro-batches with accumulative_counts 2 (the first backward inside no_sync) must
  // give the parameters of one single-process step on both micro-batches' global rows.
  auto make_batch = [](int micro) {
    Tensor x = random_tensor({kGlobalBatch, 6}, 700 + micro);
    Tensor y = Tensor::empty({kGlobalBatch, 1});
    for (int64_t i = 0; i < kGlobalBatch; ++i) y.data<float>()[i] = x.at(i * 6 + 2) > 0 ? 1.0f : 0.0f;
    return Batch{x, y};
  };
  auto reference = std::make_shared<MlpClassifier>();
  OptimWrapper ref_wrapper(
      std::make_shared<optim::SGD>(reference->parameters(), optim::SGDOptions{.lr = 0.5}));
  Batch b0 = make_batch(0), b1 = make_batch(1);
  Batch both{Tensor::empty({2 * kGlobalBatch, 6}), Tensor::empty({2 * kGlobalBatch, 1})};
  both.inputs.narrow_rows(0, kGlobalBatch).copy_(b0.inputs);
  both.inputs.narrow_rows(kGlobalBatch, kGlobalBatch).copy_(b1.inputs);
  both.targets.narrow_rows(0, kGlobalBatch).copy_(b0.targets);
  both.targets.narrow_rows(kGlobalBatch, kGlobalBatch).copy_(b1.targets);
  ref_wrapper.update_params(parse_losses(reference->forward_losses(both)).first);

  auto model = std::make_shared<MlpClassifier>();
  OptimWrapper wrapper(std::make_shared<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.5}), 2);
  DistributedDataParallel ddp(model, world());
  int64_t synced = ddp.reducer().synced_backwards();
  ddp.train_step(Batch{my_slice(b0.inputs), my_slice(b0.targets)}, wrapper);
  CHECK(ddp.reducer().synced_backwards() == synced);  // accumulated locally, nothing sent
  ddp.train_step(Batch{my_slice(b1.inputs), my_slice(b1.targets)}, wrapper);
  CHECK(ddp.reducer().synced_backwards() == synced + 1);
  std::vector<Tensor> got, expected;
  for (const Variable& p : model->parameters()) got.push_back(p.data().clone());
  for (const Variable& p : reference->parameters()) expected.push_back(p.data().clone());
  require_close(got, expected, 1e-5);
}

TEST_CASE("buffers are verified at wrap time and broadcast from rank 0 before each step",
          "[reducer][buffers]") {
  auto model = std::make_shared<DataParallelModel>();
  model->register_parameter("w", zeros({2}));
  Tensor& running = model->register_buffer("running", Tensor::full({3}, 100.0 + world()->rank()));
  {
    DistributedDataParallel ddp(model, world());
    CHECK(running.at(0) == 100.0);  // rank 0's value everywhere after wrapping
    running.fill_(200.0 + world()->rank());
    ddp.sync_buffers();
    CHECK(running.at(2) == 200.0);
  }  // unwrapped: a model is wrapped once at a time
  DdpOptions no_broadcast;
  no_broadcast.broadcast_buffers = false;
  DistributedDataParallel quiet(model, world(), no_broadcast);
  running.fill_(300.0 + world()->rank());
  quiet.sync_buffers();
  CHECK(running.at(1) == 300.0 + world()->rank());
}

TEST_CASE("the D step synchronises D only; G's parameters cost no bytes", "[reducer][phases]") {
  auto gan = std::make_shared<TinyGan>(3, false);
  DistributedDataParallel ddp(gan, world());
  size_t d_bytes = 0, g_bytes = 0;
  for (const Variable& p : gan->discriminator->parameters()) {
    // the extra block is not used in the static GAN
    d_bytes += p.data().bytes();
  }
  for (const Variable& p : gan->discriminator->extra->parameters()) d_bytes -= p.data().bytes();
  for (const Variable& p : gan->generator->parameters()) g_bytes += p.data().bytes();

  Tensor z = my_slice(random_tensor({kGlobalBatch, 4}, 5));
  Tensor real = my_slice(random_tensor({kGlobalBatch, 3}, 6));
  for (int it = 0; it < 3; ++it) {
    Variable fake = gan->generator->forward(Variable(z));  // G's forward runs inside the D step
    Variable loss_d = mean(softplus(gan->discriminator->run(fake.detach(), false))) +
                      mean(softplus(-gan->discriminator->run(Variable(real), false)));
    gan->zero_grad();
    loss_d.backward();
    CHECK(ddp.reducer().last_backward_bytes() == d_bytes);
    for (const Variable& p : gan->generator->parameters()) CHECK_FALSE(p.grad().defined());
    Variable loss_g = mean(softplus(-gan->discriminator->run(fake, false)));
    loss_g.backward();
    CHECK(ddp.reducer().last_backward_bytes() == d_bytes + g_bytes);
  }
  auto stats = ddp.reducer().stats();
  REQUIRE(stats.size() == 2);  // the D phase and the G phase
  CHECK(stats[0].description.find("discriminator") != std::string::npos);
  CHECK(stats[0].description.find("generator") == std::string::npos);
  CHECK(stats[0].backwards == 3);
  CHECK(stats[0].rebuilds == 1);  // rebuilt once from the observed order, at its second backward
  CHECK(stats[1].rebuilds == 1);
  CHECK(buckets_within_parameters(ddp.reducer()));  // D and G phases share one flat storage
}

TEST_CASE("detect_anomalous_params names what a reached part holds but the loss does not reach",
          "[reducer][anomalous]") {
  using Names = std::vector<std::string>;
  const Names extra = {"discriminator.extra.weight", "discriminator.extra.bias"};
  Tensor z = my_slice(random_tensor({kGlobalBatch, 4}, 5));
  Tensor real = my_slice(random_tensor({kGlobalBatch, 3}, 6));
  for (bool on : {true, false}) {
    INFO("detect_anomalous_params " << on);
    auto gan = std::make_shared<TinyGan>(3, true);
    DdpOptions options;
    options.reducer.detect_anomalous_params = on;
    DistributedDataParallel ddp(gan, world(), options);
    Variable fake = gan->generator->forward(Variable(z));
    // The D step without the extra layer: D's extra is missed; G is not reached at all
    // (by design), so not named.
    Variable loss_d = mean(softplus(gan->discriminator->run(fake.detach(), false))) +
                      mean(softplus(-gan->discriminator->run(Variable(real), false)));
    loss_d.backward();
    CHECK(ddp.reducer().unreached_parameters() == (on ? extra : Names{}));
    // The G step through the extra layer reaches everything.
    Variable loss_g = mean(softplus(-gan->discriminator->run(fake, true)));
    loss_g.backward();
    CHECK(ddp.reducer().unreached_parameters().empty());
    // The explicit prepare_for_backward finds the same.
    Variable again = mean(softplus(gan->discriminator->run(Variable(real), false)));
    ddp.reducer().prepare_for_backward(again);
    again.backward();
    CHECK(ddp.reducer().unreached_parameters() == (on ? extra : Names{}));
  }
}

TEST_CASE("rank-dependent control flow: averaged gradients, untouched unused parameter", "[reducer]") {
  auto model = std::make_shared<DataParallelModel>();
  Variable a = model->register_parameter("a", zeros({3}));
  Variable b = model->register_parameter("b", zeros({3}));
  Variable c = model->register_parameter("c", zeros({3}));
  DistributedDataParallel ddp(model, world());
  c.set_grad(Tensor::full({3}, 42.0));  // nobody uses c: it must keep this gradient
  int r = world()->rank(), n = world()->size();
  Variable x = Variable(Tensor::full({3}, r + 1.0));
  Variable loss = r % 2 == 0 ? sum(a * x) : sum(b * x);
  loss.backward();
  double expect_a = 0, expect_b = 0;
  for (int q = 0; q < n; ++q) (q % 2 == 0 ? expect_a : expect_b) += (q + 1.0) / n;
  CHECK(a.grad().at(0) == Approx(expect_a));
  if (n > 1) {
    CHECK(b.grad().at(2) == Approx(expect_b));
  } else {
    CHECK_FALSE(b.grad().defined());  // nobody used b
  }
  CHECK(c.grad().at(1) == 42.0);
  size_t expected_bytes = (n > 1 ? 2 : 1) * 3 * sizeof(float);
  CHECK(ddp.reducer().last_backward_bytes() == expected_bytes);
}

TEST_CASE("no_sync over 3 micro-batches equals one synced step on the concatenated batch",
          "[reducer][no_sync]") {
  // Reference: one process, each micro-batch on the global rows.
  auto ref = make_side_model();
  for (int micro = 0; micro < 3; ++micro) {
    micro_batch_loss(*ref, random_tensor({kGlobalBatch, 5}, 300 + micro), micro).backward();
  }

  auto model = make_side_model();
  DistributedDataParallel ddp(model, world());
  int64_t synced_before = ddp.reducer().synced_backwards();
  {
    auto guard = ddp.no_sync();
    for (int micro = 0; micro < 2; ++micro) {
      micro_batch_loss(*model, my_slice(random_tensor({kGlobalBatch, 5}, 300 + micro)), micro).backward();
    }
  }
  CHECK(ddp.reducer().synced_backwards() == synced_before);  // nothing communicated
  micro_batch_loss(*model, my_slice(random_tensor({kGlobalBatch, 5}, 302)), 2).backward();
  CHECK(ddp.reducer().synced_backwards() == synced_before + 1);
  auto got = model->named_parameters();
  auto expected = ref->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    auto g = got[i].second.grad().to_vector(), e = expected[i].second.grad().to_vector();
    for (size_t k = 0; k < g.size(); ++k) CHECK(g[k] == Approx(e[k]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("gradient_as_bucket_view leaves gradients as views with the averaged values", "[reducer]") {
  auto model = std::make_shared<DataParallelModel>();
  Variable w = model->register_parameter("w", zeros({4}));
  DdpOptions options;
  options.reducer.gradient_as_bucket_view = true;
  DistributedDataParallel ddp(model, world(), options);
  int r = world()->rank(), n = world()->size();
  // The first backward of a phase uses the initial layout, the second rebuilds it once;
  // from then on the gradient stays a view into the same bucket.
  for (int i = 0; i < 2; ++i) {
    w.set_grad(Tensor());
    sum(w * Variable(Tensor::full({4}, r + 1.0))).backward();
    CHECK(w.grad().at(3) == Approx((n + 1) / 2.0));
  }
  Tensor view = w.grad();
  sum(w * Variable(Tensor::full({4}, 1.0))).backward();  // accumulates into the view
  CHECK(w.grad().shares_storage_with(view));
  CHECK(w.grad().offset() == view.offset());
  CHECK(w.grad().at(0) == Approx((n + 1) / 2.0 + 1.0));
}

TEST_CASE("fp16 and bf16 compression hooks stay close to fp32 and do not overflow", "[reducer][hooks]") {
  int r = world()->rank(), n = world()->size();
  for (int which = 0; which < 2; ++which) {
    auto model = std::make_shared<DataParallelModel>();
    Variable w = model->register_parameter("w", zeros({5}));
    DistributedDataParallel ddp(model, world());
    ddp.reducer().register_comm_hook(which == 0 ? fp16_compress_hook() : bf16_compress_hook());
    INFO((which == 0 ? "fp16" : "bf16"));
    // A gradient of 60 000 on every rank: summing undivided would overflow fp16 at 2+ ranks.
    sum(w * Variable(Tensor::full({5}, 60000.0))).backward();
    CHECK(std::isfinite(w.grad().at(0)));
    CHECK(w.grad().at(0) == Approx(60000.0).epsilon(which == 0 ? 1e-3 : 1e-2));
    w.set_grad(Tensor());
    sum(w * Variable(Tensor::full({5}, 0.1 * (r + 1)))).backward();
    CHECK(w.grad().at(4) == Approx(0.1 * (n + 1) / 2.0).epsilon(which == 0 ? 2e-3 : 1e-2));
  }
  // A user hook sees the bucket and returns its reduction (here: the local values doubled).
  auto model = std::make_shared<DataParallelModel>();
  Variable w = model->register_parameter("w", zeros({2}));
  DistributedDataParallel ddp(model, world());
  std::vector<std::string> seen;
  ddp.reducer().register_comm_hook(make_comm_hook("double", [&](GradBucket& b) {
    seen = b.param_names;
    Tensor out = b.buffer.clone();
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] *= 2;
    return out;
  }));
  sum(w * Variable(Tensor::full({2}, 3.0))).backward();
  CHECK(seen == std::vector<std::string>{"w"});
  CHECK(w.grad().at(1) == 6.0);
}

TEST_CASE("models that differ across ranks are refused with a named error", "[reducer][errors]") {
  if (world()->size() < 2) return;
  int r = world()->rank();
  {
    auto model = std::make_shared<DataParallelModel>();
    model->register_parameter("w", zeros({4, r == 1 ? 5 : 3}));
    if (r == 1) {
      CHECK_THROWS_WITH(DistributedDataParallel(model, world()),
                        Catch::Contains("model differs across ranks") &&
                            Catch::Contains("rank 0 has 'w' float32[4, 3], rank 1 has 'w' float32[4, 5]"));
    } else {
      CHECK_THROWS_WITH(DistributedDataParallel(model, world()),
                        Catch::Contains("model differs across ranks"));
    }
  }
  {
    auto model = std::make_shared<DataParallelModel>();
    model->register_parameter("w", zeros({2}));
    if (r == 1) model->register_parameter("extra", zeros({2}));
    CHECK_THROWS_WITH(DistributedDataParallel(model, world()), Catch::Contains("model differs across ranks"));
  }
}

// A model whose layers are members but were never registered: nothing to synchronise.
class UnregisteredModel : public DataParallelModel {
 public:
  UnregisteredModel() : fc(std::make_shared<nn::Linear>(3, 2)) {}
  std::string type_name() const override { return "UnregisteredModel"; }
  std::shared_ptr<nn::Linear> fc;  // not register_module'd
};

TEST_CASE("wrapping a model without registered parameters, or twice, is refused", "[reducer][errors]") {
  // Catch's combined matchers hold their parts by reference: build each in its CHECK.
  auto unregistered = std::make_shared<UnregisteredModel>();
  CHECK_THROWS_WITH(
      DistributedDataParallel(unregistered, world()),
      Catch::Contains("DistributedDataParallel: UnregisteredModel has no registered parameters") &&
          Catch::Contains("register_module(\"name\", layer)") &&
          Catch::Contains("register_parameter(\"name\", tensor)"));
  CHECK_THROWS_WITH(
      SeparateDistributedDataParallel(unregistered, world()),
      Catch::Contains("SeparateDistributedDataParallel: UnregisteredModel has no registered parameters") &&
          Catch::Contains("register_module(\"name\", layer)"));

  auto frozen = std::make_shared<DataParallelModel>();
  frozen->register_parameter("w", zeros({2}), /*requires_grad=*/false);
  CHECK_THROWS_WITH(DistributedDataParallel(frozen, world()),
                    Catch::Contains("is frozen (1 with requires_grad false)"));

  auto top_level = std::make_shared<TinyGan>(3, false);
  top_level->register_parameter("scale", zeros({1}));
  CHECK_THROWS_WITH(SeparateDistributedDataParallel(top_level, world()),
                    Catch::Contains("parameter 'scale' is registered on the model itself, in no child"));

  auto gan = std::make_shared<TinyGan>(3, false);
  {
    DistributedDataParallel ddp(gan, world());
    CHECK_THROWS_WITH(
        DistributedDataParallel(gan, world()),
        Catch::Contains("parameter 'generator.0.weight' is already synchronised by the Reducer for "
                        "TinyGan: wrap a model once"));
    CHECK_THROWS_WITH(SeparateDistributedDataParallel(gan, world()),
                      Catch::Contains("is already synchronised by the Reducer for TinyGan"));
  }
  SeparateDistributedDataParallel again(gan, world());  // the first wrapper is gone: allowed
  CHECK_THROWS_WITH(DistributedDataParallel(gan, world()),
                    Catch::Contains("is already synchronised by the Reducer for generator"));
}

TEST_CASE("ranks running different phases are detected at the agreement", "[reducer][errors]") {
  if (world()->size() < 2) return;
  auto gan = std::make_shared<TinyGan>(3, false);
  DistributedDataParallel ddp(gan, world());
  Tensor z = my_slice(random_tensor({kGlobalBatch, 4}, 5));
  Variable fake = gan->generator->forward(Variable(z));
  // Rank 0 runs the D step's backward while the others run the G step's.
  Variable loss = world()->rank() == 0 ? mean(gan->discriminator->run(fake.detach(), false))
                                       : mean(gan->discriminator->run(fake, false));
  CHECK_THROWS_WITH(loss.backward(), Catch::Contains("ranks diverge") &&
                                         Catch::Contains("part 'generator'") &&
                                         Catch::Contains("generator.0.weight"));
}

TEST_CASE("a rank whose backward reaches none of the parameters stops every rank by name",
          "[reducer][errors]") {
  // Rank 1 uses the model's one tensor in even iterations only, and in odd ones runs a
  // backward through something else. Without the position check, rank 0's agreement of
  // iteration 1 would pair with rank 1's of iteration 2 and average the two.
  if (world()->size() < 2) return;
  const int rank = world()->rank();
  Variable w(random_tensor({4}, 7), true);
  Variable stray(random_tensor({4}, 8), true);
  Variable x(random_tensor({4}, 100 + static_cast<uint64_t>(rank)));
  Reducer reducer({w}, {"w"}, world(), ReducerOptions{.name = "OneLayer"});
  optim::SGD opt({w, stray}, {.lr = 0.1});
  std::string error;
  try {
    for (int it = 0; it < 4; ++it) {
      opt.zero_grad();
      Variable loss = rank == 1 && it % 2 == 1 ? sum(mul(stray, x)) : sum(mul(w, x));
      loss.backward();
      opt.step();
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  INFO(error);
  CHECK(error.find("ranks diverge in OneLayer: the ranks are at different backwards or optimizer steps") !=
        std::string::npos);
  CHECK(error.find("rank 0: backward 2 after 1 optimizer step; rank 1: backward 3 after 2 optimizer steps") !=
        std::string::npos);
  // The stray backward names itself.
  CHECK(error.find("Rank 1 ran 1 backward pass that reached no parameter of OneLayer") != std::string::npos);
}

TEST_CASE("a backward one rank runs alone inside a LocalBackwardScope joins no Reducer",
          "[reducer][position]") {
  // The same stray backwards as above, each inside the scope and followed by an optimizer
  // step, as rank 0 trains FID's feature network alone: no Reducer sees them, the ranks stay
  // in step, and w's gradient is the exact average over the ranks.
  const int rank = world()->rank(), n = world()->size();
  Variable w(Tensor::full({4}, 1.0), true);
  Variable stray(Tensor::full({4}, 1.0), true);
  Variable x(Tensor::full({4}, rank + 1.0));
  Reducer reducer({w}, {"w"}, world(), ReducerOptions{.name = "OneLayer"});
  optim::Adam alone({stray}, {.lr = 1e-3});
  for (int it = 0; it < 4; ++it) {
    w.set_grad(Tensor());
    if (rank == 1) {
      LocalBackwardScope local;  // e.g. a network rank 1 trains on its own
      for (int k = 0; k < 3; ++k) {
        stray.set_grad(Tensor());
        sum(mul(stray, x)).backward();
        alone.step();
      }
    }
    sum(mul(w, x)).backward();
    for (double g : w.grad().to_vector()) CHECK(g == (n + 1) / 2.0);  // mean of 1..n
  }
}

TEST_CASE("pytorch-pfn-extras options over MPI: negotiate_grads, reduce_function, allow_absent_ranks",
          "[reducer][pfn]") {
  // Rank r's input is n * (r + 1) * scale, so every average is exact (see
  // tests/reducer/test_reducer_pfn_options.cpp, which covers each option at 1-4 thread ranks).
  const int r = world()->rank(), n = world()->size();
  auto input = [&](const Shape& shape, double scale) {
    return Variable(Tensor::full(shape, n * (r + 1.0) * scale));
  };
  const double average = n * (n + 1) / 2.0;  // of input(.., 1.0)
  {
    INFO("negotiate_grads=false: no agreement collective, the average");
    auto group = std::make_shared<CountingGroup>(world());
    Variable a(Tensor::zeros({3}), true);
    Reducer reducer({a}, {"a"}, group, ReducerOptions{.negotiate_grads = false, .name = "NoNegotiation"});
    group->clear();
    for (int it = 0; it < 2; ++it) {
      a.set_grad(Tensor());
      sum(a * input({3}, 1.0)).backward();
    }
    CHECK(group->count("allreduce", "agreement") == 0);
    CHECK(reducer.agreements() == 0);
    CHECK(a.grad().to_vector() == std::vector<double>(3, average));
  }
  {
    INFO("a reduce_function that sums: exactly n times the average");
    Variable a(Tensor::zeros({3}), true);
    Reducer reducer({a}, {"a"}, world(),
                    ReducerOptions{.reduce_function =
                                       [](std::vector<Tensor>& tensors, dist::ProcessGroup& group) {
                                         for (Tensor& t : tensors)
                                           group.allreduce(t, dist::ReduceOp::sum)->wait();
                                       },
                                   .name = "Summing"});
    sum(a * input({3}, 1.0)).backward();
    CHECK(a.grad().to_vector() == std::vector<double>(3, n * average));
  }
  {
    INFO("allow_absent_ranks: a head used by the even ranks, zeros from the others");
    Variable body(Tensor::zeros({3}), true), head(Tensor::zeros({2}), true);
    Reducer reducer({body, head}, {"body.w", "head.w"}, world(),
                    ReducerOptions{.allow_absent_ranks = true, .name = "Dynamic"});
    Variable loss = sum(body * input({3}, 1.0));
    if (r % 2 == 0) loss = loss + sum(head * input({2}, 3.0));
    loss.backward();
    double expected_head = 0;
    for (int q = 0; q < n; q += 2) expected_head += 3.0 * (q + 1);
    CHECK(body.grad().to_vector() == std::vector<double>(3, average));
    CHECK(head.grad().to_vector() == std::vector<double>(2, expected_head));
  }
  // A branch per rank (a on even ranks, b on odd ones), against one process on the global
  // batch: the mean of the ranks' losses, each rank's term on its branch (PyTorch's zeros from
  // the ranks that did not use a parameter).
  auto branch_loss = [&](const Variable& a, const Variable& b, int q) {
    return q % 2 == 0 ? sum(a * input({3}, 1.0)) : sum(b * input({3}, 2.0));
  };
  auto expected = [&](int q_end, int which) {  // which 0: a, 1: b; over ranks [0, q_end)
    double total = 0;
    for (int q = which; q < q_end; q += 2) total += (which == 0 ? 1.0 : 2.0) * (q + 1);
    return std::vector<double>(3, total);
  };
  if (n >= 2) {
    INFO("allow_absent_ranks: a branch per rank");
    Variable a(Tensor::zeros({3}), true), b(Tensor::zeros({3}), true);
    Reducer reducer({a, b}, {"a.w", "b.w"}, world(),
                    ReducerOptions{.allow_absent_ranks = true, .name = "Branches"});
    branch_loss(a, b, r).backward();
    CHECK(a.grad().to_vector() == expected(n, 0));
    CHECK(b.grad().to_vector() == expected(n, 1));
  }
  if (n >= 2) {
    // A backward that reaches none of a Reducer's parameters is, unannounced, not about that
    // Reducer (another model's, a rank's own computation): a rank whose model's backward
    // reaches none of it takes part by announcing the backward with prepare_for_backward,
    // as PyTorch's DDP does in its forward. Every rank announces here.
    INFO("allow_absent_ranks: a branch per rank, the last rank's backward reaching no parameter");
    Variable a(Tensor::zeros({3}), true), b(Tensor::zeros({3}), true), free(Tensor::ones({2}), true);
    Reducer reducer({a, b}, {"a.w", "b.w"}, world(),
                    ReducerOptions{.allow_absent_ranks = true, .name = "Empty"});
    const bool last = r == n - 1;
    Variable loss = last ? sum(free * 5.0) : branch_loss(a, b, r);
    reducer.prepare_for_backward({loss});
    loss.backward();
    CHECK(a.grad().to_vector() == expected(n - 1, 0));
    if (n >= 3) {
      CHECK(b.grad().to_vector() == expected(n - 1, 1));
    } else {  // at 2 ranks no rank uses b: its gradient stays undefined everywhere, as PyTorch's
      CHECK_FALSE(b.grad().defined());
    }
    if (last) CHECK(free.grad().to_vector() == std::vector<double>(2, 5.0));
  }
}

// Gradients of a two-layer net on rank `r`'s batch at `step`, for the shared-memory test.
struct SharedMemoryNet {
  std::shared_ptr<nn::Sequential> net;
  SharedMemoryNet() {
    Generator gen(33);
    // Odd sizes, so that rank slices of a bucket start and end inside gradients.
    net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(7, 13, true, gen),
                                           std::make_shared<nn::Tanh>(),
                                           std::make_shared<nn::Linear>(13, 5, true, gen));
  }
  void backward(int rank, int step) {
    Variable x(random_tensor({3, 7}, 700 + 10 * step + static_cast<uint64_t>(rank)));
    mean(square(net->forward(x))).backward();
  }
  std::vector<Tensor> grads() const {
    std::vector<Tensor> out;
    for (const Variable& p : net->parameters()) out.push_back(p.grad().clone());
    return out;
  }
};

TEST_CASE("shared-memory buckets average exactly as the MPI allreduce, in every unpack mode",
          "[reducer][shared]") {
  const int n = world()->size(), r = world()->rank();
  struct Mode {
    const char* name;
    bool view;
    NonFinitePolicy non_finite;
    double bucket_cap_mb;
  };
  const Mode modes[] = {{"straight into the gradients", false, NonFinitePolicy::off, 25.0},
                        {"several buckets", false, NonFinitePolicy::off, 1e-4},
                        {"gradient_as_bucket_view", true, NonFinitePolicy::off, 1e-4},
                        {"with a non_finite policy", false, NonFinitePolicy::skip_step, 25.0}};
  constexpr int kSteps = 3;
  // The oracle: every rank's gradients computed here, averaged.
  std::vector<std::vector<Tensor>> oracle;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<Tensor> mean_grads;
    for (int q = 0; q < n; ++q) {
      SharedMemoryNet one;
      one.backward(q, step);
      std::vector<Tensor> g = one.grads();
      for (size_t k = 0; k < g.size(); ++k) {
        if (q == 0) mean_grads.push_back(Tensor::zeros(g[k].shape()));
        for (int64_t i = 0; i < g[k].numel(); ++i)
          mean_grads[k].data<float>()[i] += g[k].data<float>()[i] / n;
      }
    }
    oracle.push_back(mean_grads);
  }
  for (const Mode& mode : modes) {
    std::vector<std::vector<Tensor>> got[2];
    for (bool shared : {true, false}) {
      INFO(mode.name << (shared ? ", shared memory" : ", MPI allreduce") << ", rank " << r << " of " << n);
      SharedMemoryNet model;
      std::vector<std::string> names;
      for (const auto& [name, p] : model.net->named_parameters()) names.push_back(name);
      ReducerOptions options;
      options.shared_memory_allreduce = shared;
      options.gradient_as_bucket_view = mode.view;
      options.non_finite = mode.non_finite;
      options.bucket_cap_mb = mode.bucket_cap_mb;
      options.first_bucket_cap_mb = mode.bucket_cap_mb;
      Reducer reducer(model.net->parameters(), names, world(), options);
      CHECK(reducer.shared_memory() == (shared && n > 1));
      for (int step = 0; step < kSteps; ++step) {
        model.net->zero_grad();
        model.backward(r, step);
        got[shared ? 0 : 1].push_back(model.grads());
        require_close(got[shared ? 0 : 1].back(), oracle[static_cast<size_t>(step)], 1e-6);
      }
      if (mode.bucket_cap_mb < 1) CHECK(reducer.stats().front().bucket_bytes.size() >= 2);
    }
    for (int step = 0; step < kSteps; ++step) {
      // Two ranks: a + b either way, bitwise. More: MPI may sum in another order.
      if (n <= 2) {
        for (size_t k = 0; k < got[0][static_cast<size_t>(step)].size(); ++k) {
          CHECK(got[0][static_cast<size_t>(step)][k].to_vector() ==
                got[1][static_cast<size_t>(step)][k].to_vector());
        }
      }
      require_close(got[0][static_cast<size_t>(step)], got[1][static_cast<size_t>(step)], 1e-6);
      require_replicas_identical(got[0][static_cast<size_t>(step)], *world());
    }
  }
}
