// The Reducer options users bring from pytorch-pfn-extras, at 1-4 thread ranks: negotiate_grads
// off (no agreement collective, counted through a forwarding group), reduce_function and
// broadcast_function, comm hooks removed through their handle, pre-bucket hooks,
// allow_absent_ranks for a part used on some ranks only, and the warning for the PyTorch
// flags that change nothing. Gradients are chosen so that every average is exact
// (rank r's gradient is a multiple of the world size), and compared exactly.
// Catch2 assertions are not thread-safe: ranks record what they saw, the main thread checks.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/observer_scope.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "reducer/ddp.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/reducer/counting_group.h"
#include "tests/reducer/gan_fixture.h"

using namespace tandem;
using namespace tandem::testing;

namespace {

constexpr int kMaxRanks = 4;

void run_reducer_ranks(int size, const std::function<void(std::shared_ptr<dist::ProcessGroup>)>& fn) {
  dist::run_ranks(size, [&](std::shared_ptr<dist::ProcessGroup> group) {
    ThreadObserverScope scope;
    fn(std::move(group));
  });
}

// Rank r's input for a parameter: n * (r + 1) * scale in every element, so that the
// average over n ranks, sum of (r + 1) * scale, is exact in float32.
Variable rank_input(const Shape& shape, int rank, int size, double scale) {
  return Variable(Tensor::full(shape, size * (rank + 1.0) * scale));
}

// The exact average of rank_input over `size` ranks.
double exact_average(int size, double scale) { return scale * size * (size + 1) / 2.0; }

std::vector<double> grad_values(const Variable& p) {
  return p.grad().defined() ? p.grad().to_vector() : std::vector<double>{};
}

// A pfn-style reduce_function that sums (does not divide by the world size).
void sum_function(std::vector<Tensor>& tensors, dist::ProcessGroup& group) {
  for (Tensor& t : tensors) group.allreduce(t, dist::ReduceOp::sum, "reduce_function sum")->wait();
}

}  // namespace

TEST_CASE("threads: negotiate_grads=false syncs every parameter at every backward without the agreement",
          "[reducer][threads][pfn]") {
  struct Seen {
    int agreement_ops = -1, bucket_ops = -1;
    int64_t agreements = -1;
    std::vector<double> a, b_used, b_unreached;
  };
  for (int n = 1; n <= kMaxRanks; ++n) {
    for (bool negotiate : {true, false}) {
      INFO(n << " thread ranks, negotiate_grads " << negotiate);
      std::vector<Seen> seen(static_cast<size_t>(n));
      run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> inner) {
        Seen& s = seen[static_cast<size_t>(inner->rank())];
        auto group = std::make_shared<CountingGroup>(inner);
        Variable a(Tensor::zeros({3}), true), b(Tensor::zeros({2}), true);
        Reducer reducer({a, b}, {"a", "b"}, group,
                        ReducerOptions{.negotiate_grads = negotiate, .name = "Pair"});
        group->clear();  // what construction issued (verification, broadcast) is not counted
        const int r = inner->rank();
        for (int it = 0; it < 3; ++it) {  // every parameter used: the average
          a.set_grad(Tensor());
          b.set_grad(Tensor());
          (sum(a * rank_input({3}, r, n, 1.0)) + sum(b * rank_input({2}, r, n, 2.0))).backward();
        }
        s.agreement_ops = group->count("allreduce", "used-parameter agreement");
        s.bucket_ops = group->count("allreduce", "bucket 0 of phase");
        s.agreements = reducer.agreements();
        s.a = grad_values(a);
        s.b_used = grad_values(b);
        b.set_grad(Tensor());
        sum(a * rank_input({3}, r, n, 1.0)).backward();  // b reached by no rank
        s.b_unreached = grad_values(b);
      });
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        const Seen& s = seen[static_cast<size_t>(r)];
        CHECK(s.agreement_ops == (negotiate ? 3 : 0));
        CHECK(s.agreements == (negotiate ? 3 : 0));
        CHECK(s.bucket_ops == 3);  // one bucket holds both
        CHECK(s.a == std::vector<double>(3, exact_average(n, 1.0)));
        CHECK(s.b_used == std::vector<double>(2, exact_average(n, 2.0)));
        // Negotiated: nobody used b, so it keeps its (absent) gradient; not negotiated:
        // b is synced anyway, every rank contributing zeros.
        CHECK(s.b_unreached == (negotiate ? std::vector<double>{} : std::vector<double>(2, 0.0)));
      }
    }
  }
}

TEST_CASE("threads: a static GAN with negotiate_grads=false matches the single-process oracle",
          "[reducer][threads][pfn][oracle]") {
  // Every parameter the optimizers step is used (the static D never uses its extra layer,
  // which then gets zero gradients, and Adam leaves a parameter with zero gradients where
  // it is). G's gradients, averaged again in the D step, are cleared before the G step.
  const std::vector<Tensor> reference = train_gan(Style::none, false, 6, nullptr);
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<std::vector<Tensor>> got(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      got[static_cast<size_t>(g->rank())] = train_gan(Style::whole_no_negotiate, false, 6, g);
    });
    require_close(got[0], reference, 1e-6);
    for (int r = 1; r < n; ++r) require_bitwise_equal(got[static_cast<size_t>(r)], got[0]);
  }
}

TEST_CASE("threads: reduce_function replaces the allreduce, and a comm hook's handle removes it",
          "[reducer][threads][pfn][hooks]") {
  struct Seen {
    std::vector<double> averaged, summed, hooked, after_remove, default_again;
    std::vector<Shape> shapes;
    bool active_before = false, active_after = true;
  };
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<Seen> seen(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      Seen& s = seen[static_cast<size_t>(g->rank())];
      const int r = g->rank();
      auto loss = [&](Variable& w) { return sum(w * rank_input({2, 3}, r, n, 0.5)); };
      Variable plain(Tensor::zeros({2, 3}), true), summing(Tensor::zeros({2, 3}), true);
      Reducer by_default({plain}, {"w"}, g, ReducerOptions{.name = "Default"});
      Reducer by_function({summing}, {"w"}, g,
                          ReducerOptions{.reduce_function =
                                             [&](std::vector<Tensor>& tensors, dist::ProcessGroup& group) {
                                               for (const Tensor& t : tensors) s.shapes.push_back(t.shape());
                                               sum_function(tensors, group);
                                             },
                                         .name = "Summing"});
      loss(plain).backward();
      s.averaged = grad_values(plain);
      loss(summing).backward();
      s.summed = grad_values(summing);
      // A comm hook replaces the reduce_function until its handle removes it.
      HookHandle handle = by_function.register_comm_hook(
          make_comm_hook("sevens", [](GradBucket& b) { return Tensor::full(b.buffer.shape(), 7.0); }));
      s.active_before = handle.active();
      summing.set_grad(Tensor());
      loss(summing).backward();
      s.hooked = grad_values(summing);
      handle.remove();
      handle.remove();  // a second remove does nothing
      s.active_after = handle.active();
      summing.set_grad(Tensor());
      loss(summing).backward();
      s.after_remove = grad_values(summing);
      // Over the default allreduce: removing restores the average.
      by_default
          .register_comm_hook(
              make_comm_hook("sevens", [](GradBucket& b) { return Tensor::full(b.buffer.shape(), 7.0); }))
          .remove();
      plain.set_grad(Tensor());
      loss(plain).backward();
      s.default_again = grad_values(plain);
    });
    const double average = exact_average(n, 0.5);
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      const Seen& s = seen[static_cast<size_t>(r)];
      CHECK(s.averaged == std::vector<double>(6, average));
      CHECK(s.summed == std::vector<double>(6, n * average));  // exactly n times the average
      // Called with the gradients in their shapes, in the two backwards without the hook.
      CHECK(s.shapes == std::vector<Shape>{Shape{2, 3}, Shape{2, 3}});
      CHECK(s.active_before);
      CHECK(s.hooked == std::vector<double>(6, 7.0));
      CHECK_FALSE(s.active_after);
      CHECK(s.after_remove == std::vector<double>(6, n * average));
      CHECK(s.default_again == std::vector<double>(6, average));
    }
  }
}

TEST_CASE("threads: a pre-bucket hook sees every bucket in index order once per backward",
          "[reducer][threads][pfn][hooks]") {
  struct Call {
    size_t index;
    std::vector<double> flat;
  };
  constexpr int kParams = 4, kBackwards = 3;
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<std::vector<Call>> calls(static_cast<size_t>(n));
    std::vector<size_t> buckets(static_cast<size_t>(n));
    std::vector<std::vector<double>> grads(static_cast<size_t>(n));
    std::vector<int> self_removing_calls(static_cast<size_t>(n));
    std::vector<std::vector<double>> edited(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      const int r = g->rank();
      std::vector<Variable> params;
      std::vector<std::string> names;
      for (int i = 0; i < kParams; ++i) {
        params.emplace_back(Tensor::zeros({2}), true);
        names.push_back("p" + std::to_string(i));
      }
      // Caps below one parameter's bytes: one bucket per parameter.
      Reducer reducer(params, names, g,
                      ReducerOptions{.bucket_cap_mb = 1e-6, .first_bucket_cap_mb = 1e-6, .name = "Four"});
      std::vector<Call>& mine = calls[static_cast<size_t>(r)];
      HookHandle handle = reducer.register_pre_bucket_hook([&](size_t index, Tensor& flat) {
        mine.push_back({index, flat.to_vector()});
      });
      // A hook that removes itself at its first call still sees the rest of that backward's
      // buckets: hooks are read when a backward's sync begins.
      HookHandle self_removing;
      self_removing = reducer.register_pre_bucket_hook([&](size_t, Tensor&) {
        ++self_removing_calls[static_cast<size_t>(r)];
        self_removing.remove();
      });
      auto backward = [&] {
        Variable loss = sum(params[0] * rank_input({2}, r, n, 1.0));
        for (int i = 1; i < kParams; ++i)
          loss = loss + sum(params[static_cast<size_t>(i)] * rank_input({2}, r, n, 1.0));
        for (Variable& p : params) p.set_grad(Tensor());
        loss.backward();
      };
      for (int b = 0; b < kBackwards; ++b) backward();
      buckets[static_cast<size_t>(r)] = reducer.stats().at(0).bucket_bytes.size();
      handle.remove();
      backward();  // not seen
      grads[static_cast<size_t>(r)] = grad_values(params[3]);
      // A hook may change the bucket in place (every rank's 5 is summed); replacing its
      // handle changes nothing.
      reducer.register_pre_bucket_hook(
          [](size_t, Tensor& flat) { flat.copy_(Tensor::full(flat.shape(), 5.0)); });
      reducer.register_pre_bucket_hook([](size_t, Tensor& flat) { flat = Tensor::full(flat.shape(), 9.0); });
      backward();
      edited[static_cast<size_t>(r)] = grad_values(params[3]);
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      REQUIRE(buckets[static_cast<size_t>(r)] == kParams);
      const std::vector<Call>& c = calls[static_cast<size_t>(r)];
      REQUIRE(c.size() == static_cast<size_t>(kParams * kBackwards));
      for (size_t k = 0; k < c.size(); ++k) {
        INFO("call " << k);
        CHECK(c[k].index == k % kParams);
        // This rank's gradient, divided by the world size (the default allreduce is prescaled).
        CHECK(c[k].flat == std::vector<double>(2, r + 1.0));
      }
      CHECK(grads[static_cast<size_t>(r)] == std::vector<double>(2, exact_average(n, 1.0)));
      CHECK(self_removing_calls[static_cast<size_t>(r)] == kParams);
      CHECK(edited[static_cast<size_t>(r)] == std::vector<double>(2, 5.0 * n));
    }
  }
}

TEST_CASE("threads: broadcast_function replaces the broadcasts of parameters and buffers",
          "[reducer][threads][pfn]") {
  struct Seen {
    std::vector<size_t> call_sizes;
    double w = -1, buffer = -1, buffer_after_sync = -1;
  };
  for (int n = 1; n <= kMaxRanks; ++n) {
    INFO(n << " thread ranks");
    std::vector<Seen> seen(static_cast<size_t>(n));
    run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
      Seen& s = seen[static_cast<size_t>(g->rank())];
      const int r = g->rank();
      auto model = std::make_shared<DataParallelModel>();
      Variable w = model->register_parameter("w", Variable(Tensor::full({3}, static_cast<double>(r))));
      Tensor& buffer = model->register_buffer("count", Tensor::full({1}, 10.0 * r));
      DdpOptions options;
      // pfn's shape; this one broadcasts from the last rank, so its use shows in the values.
      options.reducer.broadcast_function = [&](std::vector<Tensor>& tensors, dist::ProcessGroup& group) {
        s.call_sizes.push_back(tensors.size());
        for (Tensor& t : tensors) group.broadcast(t, group.size() - 1, "from the last rank")->wait();
      };
      DistributedDataParallel ddp(model, g, options);
      s.w = w.data().to_vector()[0];
      s.buffer = buffer.to_vector()[0];
      buffer.copy_(Tensor::full({1}, 10.0 * r));  // as a forward would update it
      ddp.sync_buffers();
      s.buffer_after_sync = buffer.to_vector()[0];
    });
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      const Seen& s = seen[static_cast<size_t>(r)];
      // The parameters (one), the buffers at wrap time (one), the buffers again in
      // sync_buffers when there is more than one rank.
      CHECK(s.call_sizes == (n > 1 ? std::vector<size_t>{1, 1, 1} : std::vector<size_t>{1, 1}));
      CHECK(s.w == n - 1.0);
      CHECK(s.buffer == 10.0 * (n - 1));
      CHECK(s.buffer_after_sync == 10.0 * (n > 1 ? n - 1 : 0));
    }
  }
}

namespace {

// A body every rank uses and a head only the even ranks use (a graph that depends on the
// rank's data). Returns each rank's error, and its gradients of body and head after each
// of two iterations (the second after zero_grad, which leaves zeros on the absent ranks).
struct AbsentRun {
  std::vector<std::string> errors;
  std::vector<std::vector<std::vector<double>>> body, head;  // [rank][iteration]
};

AbsentRun run_absent_head(int n, bool allow) {
  AbsentRun run;
  run.errors.resize(static_cast<size_t>(n));
  run.body.resize(static_cast<size_t>(n));
  run.head.resize(static_cast<size_t>(n));
  run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
    const int r = g->rank();
    const size_t me = static_cast<size_t>(r);
    Variable body(Tensor::zeros({3}), true), head(Tensor::zeros({2}), true);
    Reducer reducer({body, head}, {"body.w", "head.w"}, g,
                    ReducerOptions{.allow_absent_ranks = allow, .name = "Dynamic"});
    optim::SGD opt({body, head}, {.lr = 0.0});
    try {
      for (int it = 0; it < 2; ++it) {
        opt.zero_grad(/*set_to_none=*/it == 0);
        Variable loss = sum(body * rank_input({3}, r, n, 1.0));
        if (r % 2 == 0) loss = loss + sum(head * rank_input({2}, r, n, 3.0));
        loss.backward();
        opt.step();
        run.body[me].push_back(grad_values(body));
        run.head[me].push_back(grad_values(head));
      }
    } catch (const std::exception& e) {
      run.errors[me] = e.what();
    }
  });
  return run;
}

}  // namespace

TEST_CASE("threads: a part used on some ranks only is an error naming allow_absent_ranks",
          "[reducer][threads][pfn][errors]") {
  for (int n = 2; n <= 3; ++n) {
    INFO(n << " thread ranks");
    const AbsentRun run = run_absent_head(n, false);
    for (int r = 0; r < n; ++r) {
      const std::string& e = run.errors[static_cast<size_t>(r)];
      INFO("rank " << r << ": " << e);
      CHECK(e.find("ranks diverge in Dynamic: this backward reaches part 'head'") != std::string::npos);
      CHECK(e.find("set ReducerOptions::allow_absent_ranks (DdpOptions::reducer.allow_absent_ranks)") !=
            std::string::npos);
    }
  }
}

TEST_CASE("threads: allow_absent_ranks averages a part used on some ranks with zeros from the others",
          "[reducer][threads][pfn]") {
  for (int n = 2; n <= 3; ++n) {
    INFO(n << " thread ranks");
    const AbsentRun run = run_absent_head(n, true);
    // head: the sum over the even ranks of n * (r + 1) * 3, divided by n.
    double head = 0;
    for (int r = 0; r < n; r += 2) head += 3.0 * (r + 1);
    for (int r = 0; r < n; ++r) {
      const size_t me = static_cast<size_t>(r);
      INFO("rank " << r << ": " << run.errors[me]);
      REQUIRE(run.errors[me].empty());
      for (int it = 0; it < 2; ++it) {
        INFO("iteration " << it);
        CHECK(run.body[me][static_cast<size_t>(it)] == std::vector<double>(3, exact_average(n, 1.0)));
        CHECK(run.head[me][static_cast<size_t>(it)] == std::vector<double>(2, head));
      }
    }
  }
}

namespace {

// What `fn` writes to stderr (file descriptor 2) while it runs.
std::string capture_stderr(const std::function<void()>& fn) {
  std::fflush(stderr);
  FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = ::dup(2);
  ::dup2(::fileno(file), 2);
  try {
    fn();
  } catch (...) {
    ::dup2(saved, 2);
    ::close(saved);
    std::fclose(file);
    throw;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::string text;
  std::rewind(file);
  for (int c = std::fgetc(file); c != EOF; c = std::fgetc(file)) text.push_back(static_cast<char>(c));
  std::fclose(file);
  return text;
}

int occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// Makes a one-rank Reducer with `options` and runs three backwards through it.
void three_backwards(ReducerOptions options) {
  run_reducer_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> g) {
    Variable w(Tensor::zeros({2}), true);
    Reducer reducer({w}, {"w"}, g, options);
    for (int it = 0; it < 3; ++it) sum(w * Variable(Tensor::full({2}, 1.0))).backward();
  });
}

}  // namespace

TEST_CASE("threads: static_graph and find_unused_parameters say once that they change nothing",
          "[reducer][threads][pfn]") {
  const std::string quiet = capture_stderr([] { three_backwards(ReducerOptions{.name = "Quiet"}); });
  CHECK(quiet.find("nothing: every backward") == std::string::npos);

  const std::string both = capture_stderr([] {
    three_backwards(ReducerOptions{.find_unused_parameters = true, .static_graph = true, .name = "Both"});
  });
  INFO(both);
  CHECK(occurrences(
            both, "Reducer for Both: find_unused_parameters=true and static_graph=true change nothing") == 1);
  CHECK(occurrences(both, "set negotiate_grads=false") == 1);

  const std::string one =
      capture_stderr([] { three_backwards(ReducerOptions{.static_graph = true, .name = "Static"}); });
  CHECK(occurrences(one, "Reducer for Static: static_graph=true changes nothing") == 1);
}

TEST_CASE("threads: freezing D by hand, or scoping the G step, every step costs no rebuild and no warning",
          "[reducer][threads][scoped]") {
  for (GStep g_step : {GStep::frozen, GStep::update_params}) {
    INFO(g_step_name(g_step));
    std::vector<std::vector<PhaseStats>> stats(2);
    std::vector<int64_t> within(2);
    const std::string err = capture_stderr([&] {
      run_reducer_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> g) {
        auto gan = std::make_shared<TinyGan>(7, false);
        OptimWrapperDict wrappers = make_wrappers(*gan);
        DistributedDataParallel ddp(gan, g);
        for (int it = 0; it < 8; ++it) {
          Tensor real = slice_rows(random_tensor({kGlobalBatch, 3}, 1000 + it), g->rank(), 2);
          Tensor z = slice_rows(random_tensor({kGlobalBatch, 4}, 2000 + it), g->rank(), 2);
          gan_step(*gan, real, z, it, wrappers, nullptr, g_step);
        }
        stats[static_cast<size_t>(g->rank())] = ddp.reducer().stats();
        within[static_cast<size_t>(g->rank())] = buckets_within_parameters(ddp.reducer());
      });
    });
    INFO(err);
    CHECK(err.find("warning") == std::string::npos);
    for (int r = 0; r < 2; ++r) {
      REQUIRE(stats[r].size() == 2);  // the D phase and the G phase, G alone
      CHECK(stats[r][1].description.find("generator") != std::string::npos);
      CHECK(stats[r][1].description.find("discriminator") == std::string::npos);
      for (const PhaseStats& phase : stats[r]) {
        CHECK(phase.backwards == 8);
        CHECK(phase.rebuilds == 1);  // built once, rebuilt once from the observed order, then reused
      }
      CHECK(within[r] == 1);
    }
  }
}

TEST_CASE("threads: a reduce_function that replaces its tensors is kept; a wrong size is a named error",
          "[reducer][threads][pfn][errors]") {
  std::vector<double> replaced;
  std::string error;
  run_reducer_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> g) {
    Variable a(Tensor::zeros({2}), true);
    Reducer fours({a}, {"a"}, g,
                  ReducerOptions{.reduce_function =
                                     [](std::vector<Tensor>& tensors, dist::ProcessGroup&) {
                                       for (Tensor& t : tensors) t = Tensor::full(t.shape(), 4.0);
                                     },
                                 .name = "Fours"});
    sum(a * Variable(Tensor::full({2}, 1.0))).backward();
    replaced = grad_values(a);
    Variable b(Tensor::zeros({2}), true);
    Reducer wrong(
        {b}, {"layer.b"}, g,
        ReducerOptions{.reduce_function = [](std::vector<Tensor>& tensors,
                                             dist::ProcessGroup&) { tensors[0] = Tensor::zeros({3}); },
                       .name = "Wrong"});
    try {
      sum(b * Variable(Tensor::full({2}, 1.0))).backward();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  CHECK(replaced == std::vector<double>{4.0, 4.0});
  INFO(error);
  CHECK(error.find("reduce_function replaced the gradient of 'layer.b'") != std::string::npos);
  CHECK(error.find("expected 2 elements") != std::string::npos);
}

namespace {

// Two children with a parameter each, as a GAN's generator and discriminator.
class TwoParts : public DataParallelModel {
 public:
  TwoParts() {
    first = register_module("first", std::make_shared<nn::Module>());
    second = register_module("second", std::make_shared<nn::Module>());
    a = first->register_parameter("a", zeros({2, 3}));
    b = second->register_parameter("b", zeros({4}));
  }
  std::shared_ptr<nn::Module> first, second;
  Variable a, b;
};

}  // namespace

TEST_CASE("threads: both wrappers register a comm hook with each of their Reducers, one handle removes it",
          "[reducer][threads][pfn][hooks]") {
  struct Seen {
    std::vector<double> hooked_a, hooked_b, after_a, after_b;
    bool active_before = false, active_after = true;
    int pre_bucket_calls = 0;
  };
  for (bool separate : {false, true}) {
    for (int n = 1; n <= kMaxRanks; ++n) {
      INFO((separate ? "SeparateDistributedDataParallel" : "DistributedDataParallel")
           << ", " << n << " thread ranks");
      std::vector<Seen> seen(static_cast<size_t>(n));
      run_reducer_ranks(n, [&](std::shared_ptr<dist::ProcessGroup> g) {
        Seen& s = seen[static_cast<size_t>(g->rank())];
        auto model = std::make_shared<TwoParts>();
        std::unique_ptr<DataParallelWrapper> ddp;
        if (separate) {
          ddp = std::make_unique<SeparateDistributedDataParallel>(model, g);
        } else {
          ddp = std::make_unique<DistributedDataParallel>(model, g);
        }
        auto backward = [&] {
          model->a.set_grad(Tensor());
          model->b.set_grad(Tensor());
          Variable loss = sum(model->a * rank_input({2, 3}, g->rank(), n, 1.0)) +
                          sum(model->b * rank_input({4}, g->rank(), n, 2.0));
          loss.backward();
        };
        HookHandle handle = ddp->register_comm_hook(make_comm_hook(
            "sevens", [](GradBucket& bucket) { return Tensor::full(bucket.buffer.shape(), 7.0); }));
        HookHandle pre = ddp->register_pre_bucket_hook([&](size_t, Tensor&) { ++s.pre_bucket_calls; });
        s.active_before = handle.active();
        backward();
        s.hooked_a = grad_values(model->a);
        s.hooked_b = grad_values(model->b);
        handle.remove();
        pre.remove();
        s.active_after = handle.active() || pre.active();
        backward();
        s.after_a = grad_values(model->a);
        s.after_b = grad_values(model->b);
      });
      for (int r = 0; r < n; ++r) {
        INFO("rank " << r);
        const Seen& s = seen[static_cast<size_t>(r)];
        CHECK(s.active_before);
        CHECK(s.hooked_a == std::vector<double>(6, 7.0));
        CHECK(s.hooked_b == std::vector<double>(4, 7.0));
        CHECK(s.pre_bucket_calls >= (separate ? 2 : 1));  // a bucket of each Reducer
        CHECK_FALSE(s.active_after);
        CHECK(s.after_a == std::vector<double>(6, exact_average(n, 1.0)));
        CHECK(s.after_b == std::vector<double>(4, exact_average(n, 2.0)));
      }
    }
  }
}
