// training::Manager and its extensions: triggers against counts written out by hand, the order
// extensions run in, resume from the newest sound checkpoint, ranks agreeing on a stop, a
// signal and a time budget that stop a run with its checkpoint, logs averaged over ranks.
// Ranks are threads (dist::run_ranks); the assertions run after them, on what each recorded.
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "models/metrics/fid_evaluator.h"
#include "models/training/extensions.h"
#include "models/training/manager.h"
#include "runtime/checkpoint.h"
#include "runtime/dist/thread_process_group.h"
#include "tests/metrics/plant_feature_net.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::training;
using namespace tandem::testing;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> firing(const Trigger& trigger, int64_t iterations, int64_t global_batch) {
  std::vector<int64_t> fired;
  for (int64_t done = 1; done <= iterations; ++done)
    if (trigger.fires(done, global_batch, done == iterations)) fired.push_back(done);
  return fired;
}

// Records each run as "<name>@<iteration>".
struct Recorder : Extension {
  std::string name;
  Priority level;
  std::vector<std::string>* log;
  Recorder(std::string n, Priority p, std::vector<std::string>* l) : name(std::move(n)), level(p), log(l) {}
  std::string default_name() const override { return name; }
  Priority priority() const override { return level; }
  void run(Manager& manager) override { log->push_back(name + "@" + std::to_string(manager.iteration())); }
};

// Asks for a stop at one iteration, on one rank.
struct StopAt : Extension {
  int rank;
  int64_t at;
  StopAt(int r, int64_t a) : rank(r), at(a) {}
  std::string default_name() const override { return "stop_at"; }
  bool stops() const override { return true; }
  void run(Manager& manager) override {
    if (manager.world().rank() == rank && manager.iteration() == at)
      manager.request_stop("asked by the test");
  }
};

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("Trigger: iterations, kimg crossings and the last iteration", "[manager]") {
  CHECK(firing(every(3), 10, 0) == std::vector<int64_t>{3, 6, 9, 10});
  CHECK(firing(every(3, /*at_end=*/false), 10, 0) == std::vector<int64_t>{3, 6, 9});
  CHECK(firing(end(), 4, 0) == std::vector<int64_t>{4});
  CHECK(firing(never(), 4, 0).empty());
  CHECK(firing(each(), 3, 0) == std::vector<int64_t>{1, 2, 3});
  // 64 images per iteration, every 0.1 kimg = 100 images: shown 64 128 192 256 320 384 448
  // 512 crosses 100 at 2, 200 at 4, 300 at 5, 400 at 7, 500 at 8.
  CHECK(firing(every_kimg(0.1, false), 8, 64) == std::vector<int64_t>{2, 4, 5, 7, 8});
  CHECK(firing(every_kimg(0.1, false), 8, 0).empty());
  CHECK_THROWS_WITH(every(0), Catch::Contains("every(0)"));
  CHECK_THROWS_WITH(every_kimg(0.0001), Catch::Contains("at least one image"));
}

TEST_CASE("Manager::start(first_iteration): a program that resumed itself goes on from there", "[manager]") {
  TempDir tmp("manager_start_at");
  std::vector<std::string> log;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 8, .out = tmp.path.string(), .log = &out});
    manager.extend(std::make_shared<Recorder>("every3", Priority::report, &log), every(3));
    manager.start(5);
    CHECK(manager.iteration() == 5);
    CHECK(manager.state().iteration == 5);
    int64_t steps = 0;
    for (; manager.running(); ++steps) manager.end_iteration();
    manager.finish();
    CHECK(steps == 3);         // 6, 7, 8
    CHECK(out.str().empty());  // nothing read, nothing said about a resume
    CHECK_THROWS_WITH(Manager(world, {.iterations = 8, .out = tmp.path.string()}).start(9),
                      Catch::Contains("start(9): the first iteration is not in [0, 8]"));
    CHECK_THROWS_WITH(Manager(world, {.iterations = 8, .out = tmp.path.string(), .resume = true}).start(2),
                      Catch::Contains("ManagerOptions::resume is set"));
    // At the run's length already: nothing to do.
    Manager done(world, {.iterations = 8, .out = tmp.path.string()});
    done.start(8);
    CHECK_FALSE(done.running());
  });
  CHECK(log == std::vector<std::string>{"every3@6", "every3@8"});
}

TEST_CASE("Manager: extensions run at their triggers, schedules then checkpoints then the rest",
          "[manager]") {
  TempDir tmp("manager_order");
  std::vector<std::string> log;
  int observed = 0;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 4, .global_batch = 8, .out = tmp.path.string(), .log = &out});
    manager.extend(std::make_shared<Recorder>("report", Priority::report, &log), every(2));
    manager.extend(std::make_shared<Recorder>("ckpt", Priority::checkpoint, &log), every(2));
    manager.extend(std::make_shared<Recorder>("sched", Priority::schedule, &log), every(2));
    manager.extend([&](Manager& m) { log.push_back("reads " + std::to_string(m.observation().size())); },
                   every(4, false), "reader");
    manager.start();
    int64_t iterations = 0;
    while (manager.running()) {
      manager.end_iteration([&] {
        ++observed;
        return Scalars{{"a", 1.0}};
      });
      ++iterations;
    }
    manager.finish();
    CHECK(iterations == 4);
    CHECK(manager.kimg() == Approx(0.032));
    CHECK_THROWS_WITH(manager.end_iteration(), Catch::Contains("the run has ended"));
    CHECK_THROWS_WITH(manager.extend(progress_bar()), Catch::Contains("before start()"));
  });
  CHECK(log == std::vector<std::string>{"sched@2", "ckpt@2", "report@2", "sched@4", "ckpt@4", "report@4",
                                        "reads 1"});
  CHECK(observed == 1);  // read once, only where an extension asked
}

TEST_CASE("Manager: resume from the newest sound checkpoint, keep the newest K", "[manager]") {
  TempDir tmp("manager_resume");
  const std::string dir = tmp.path.string();
  auto run = [&](int64_t iterations, bool resume, int keep, std::vector<double>* seen) {
    std::string printed;
    dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
      std::ostringstream out;
      std::vector<Tensor> counter = {Tensor::scalar(0.0, DType::f64)};
      Manager manager(world,
                      {.iterations = iterations, .out = dir, .name = "m", .resume = resume, .log = &out});
      manager.state().add_tensors("counter", counter);
      manager.extend(snapshot({.keep = keep}), every(2));
      manager.start();
      seen->push_back(counter[0].data<double>()[0]);
      while (manager.running()) {
        counter[0].data<double>()[0] += 1.0;
        manager.end_iteration();
      }
      manager.finish();
      printed = out.str();
    });
    return printed;
  };
  std::vector<double> seen;
  CHECK_THAT(run(5, true, 0, &seen), Catch::Contains("no checkpoint in " + dir));
  CHECK(fs::exists(checkpoint_path(dir, "m", 2)));
  CHECK(fs::exists(checkpoint_path(dir, "m", 4)));
  CHECK(fs::exists(checkpoint_path(dir, "m", 5)));  // the last iteration
  // A damaged newest checkpoint is passed over: the run resumes from iteration 4's.
  std::string bytes = read_bytes(checkpoint_path(dir, "m", 5));
  bytes[bytes.size() - 1] ^= 0x40;
  write_bytes(checkpoint_path(dir, "m", 5), bytes);
  const std::string printed = run(8, true, 2, &seen);
  CHECK_THAT(printed, Catch::Contains("resumed from " + checkpoint_path(dir, "m", 4) + " at iteration 4"));
  CHECK(seen.back() == 4.0);  // the counter as iteration 4 saved it
  CHECK_THAT(printed, Catch::Contains("checkpoint: " + checkpoint_path(dir, "m", 8)));
  // keep 2: of 2, 4, 5 (damaged), 6, 8 the newest two are left.
  CHECK_FALSE(fs::exists(checkpoint_path(dir, "m", 2)));
  CHECK_FALSE(fs::exists(checkpoint_path(dir, "m", 5)));
  CHECK(fs::exists(checkpoint_path(dir, "m", 6)));
  CHECK(fs::exists(checkpoint_path(dir, "m", 8)));
  // A checkpoint beyond the run's length is refused by name.
  CHECK_THROWS_WITH(run(7, true, 0, &seen), Catch::Contains(checkpoint_path(dir, "m", 8)) &&
                                                Catch::Contains("beyond the run's 7 iterations"));
}

TEST_CASE("Manager: one rank asks for a stop, every rank stops at that iteration with a checkpoint",
          "[manager]") {
  TempDir tmp("manager_stop");
  std::mutex mutex;
  std::vector<int64_t> stopped_at(2, -1);
  std::vector<std::string> reasons(2);
  std::string printed;
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    std::vector<Tensor> state = {Tensor::scalar(1.0)};
    Manager manager(world, {.iterations = 100, .out = tmp.path.string(), .name = "s", .log = &out});
    manager.state().add_tensors("x", state);
    manager.extend(std::make_shared<StopAt>(1, 3));
    manager.extend(snapshot(), every(50));
    manager.start();
    while (manager.running()) manager.end_iteration();
    manager.finish();
    std::lock_guard lock(mutex);
    stopped_at[world->rank()] = manager.stopped() ? manager.iteration() : -1;
    reasons[world->rank()] = manager.stop_reason();
    if (world->rank() == 0) printed = out.str();
  });
  CHECK(stopped_at == std::vector<int64_t>{3, 3});
  CHECK(reasons[0] == "asked by the test (rank 1)");
  CHECK(reasons[1] == reasons[0]);
  CHECK_THAT(printed, Catch::Contains("stopping at iteration 3: asked by the test (rank 1)"));
  CHECK(fs::exists(checkpoint_path(tmp.path.string(), "s", 3)));  // the trigger's at_end
}

TEST_CASE("stop_on_signal: SIGTERM ends the run at the next iteration's end, then the old handler is back",
          "[manager]") {
  TempDir tmp("manager_signal");
  struct sigaction mine {};
  mine.sa_handler = SIG_IGN;
  struct sigaction before {};
  sigaction(SIGTERM, &mine, &before);
  int64_t stopped_at = -1;
  std::string reason;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 100, .out = tmp.path.string(), .log = &out});
    manager.extend(stop_on_signal());
    manager.extend(snapshot(), every(1000));
    manager.start();
    while (manager.running()) {
      if (manager.iteration() == 5) std::raise(SIGTERM);  // during iteration 5: it ends at 6
      manager.end_iteration();
    }
    manager.finish();
    stopped_at = manager.iteration();
    reason = manager.stop_reason();
  });
  CHECK(stopped_at == 6);
  CHECK(reason == "SIGTERM received");
  CHECK(fs::exists(checkpoint_path(tmp.path.string(), "checkpoint", 6)));
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  CHECK(after.sa_handler == SIG_IGN);  // ours, put back
  sigaction(SIGTERM, &before, nullptr);
}

TEST_CASE("time_budget: stops before the next iteration would pass the budget", "[manager]") {
  TempDir tmp("manager_budget");
  using Clock = TimeBudgetOptions::Clock;
  Clock::time_point now{};
  int64_t stopped_at = -1;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 100, .out = tmp.path.string(), .log = &out});
    manager.extend(time_budget({.seconds = 10.5, .reserve_s = 2.0, .now = [&] { return now; }}));
    manager.start();
    while (manager.running()) {
      now += std::chrono::seconds(1);  // each iteration takes one second
      manager.end_iteration();
    }
    manager.finish();
    stopped_at = manager.iteration();
    CHECK_THAT(manager.stop_reason(), Catch::Contains("time budget of 10.5 s"));
  });
  // After k iterations: k s spent, 1 s for the next, 2 s reserved: k + 3 > 10.5 first at 8.
  CHECK(stopped_at == 8);
}

TEST_CASE("log_report: averaged over the ranks, cut back on resume; hyper_schedule follows kimg",
          "[manager]") {
  TempDir tmp("manager_log");
  const std::string dir = tmp.path.string();
  std::mutex mutex;
  std::vector<double> applied;
  auto run = [&](int64_t iterations, bool resume) {
    dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
      std::ostringstream out;
      std::vector<Tensor> none = {Tensor::scalar(0.0)};
      Manager manager(
          world, {.iterations = iterations, .global_batch = 250, .out = dir, .resume = resume, .log = &out});
      manager.state().add_tensors("none", none);
      manager.extend(log_report(), every(2));
      manager.extend(snapshot(), every(2));
      manager.extend(hyper_schedule([](double kimg) { return 1.0 + kimg; },
                                    [&, rank = world->rank()](double v) {
                                      std::lock_guard lock(mutex);
                                      if (rank == 0) applied.push_back(v);
                                    }));
      manager.start();
      while (manager.running()) {
        const double value = static_cast<double>(world->rank() + manager.iteration());
        manager.end_iteration([&] { return Scalars{{"v", value}}; });
      }
      manager.finish();
    });
  };
  run(5, false);
  // Rank r logs r + (iteration - 1) at iterations 2, 4, 5: the means are 1.5, 3.5, 4.5.
  CHECK(lines_of(dir + "/metrics.jsonl") == std::vector<std::string>{"{\"iteration\": 2, \"v\": 1.5}",
                                                                     "{\"iteration\": 4, \"v\": 3.5}",
                                                                     "{\"iteration\": 5, \"v\": 4.5}"});
  CHECK(applied == std::vector<double>{1.0, 1.25, 1.5, 1.75, 2.0, 2.25});  // at start, then after each
  fs::remove(checkpoint_path(dir, "checkpoint", 5));
  applied.clear();
  run(6, true);  // from iteration 4: line 5 goes, 6 comes
  CHECK(lines_of(dir + "/metrics.jsonl") == std::vector<std::string>{"{\"iteration\": 2, \"v\": 1.5}",
                                                                     "{\"iteration\": 4, \"v\": 3.5}",
                                                                     "{\"iteration\": 6, \"v\": 5.5}"});
  CHECK(applied == std::vector<double>{2.0, 2.25, 2.5});  // kimg 1.0 at the resume, no drift
  // The page charts the same means, the first run's history (2, 4) read back and 6 added: x
  // 2..6 over the plot's 480 pixels from 64, y 1.5..5.5 over its 180 from 192 upwards.
  const std::string page = read_bytes(dir + "/report.html");
  CHECK(page.find("id=\"state\">finished</span> iteration 6 of 6") != std::string::npos);
  const size_t series = page.find("<polyline data-series=\"v (raw)\"");
  REQUIRE(series != std::string::npos);
  const size_t begin = page.find("points=\"", series) + 8;
  CHECK(page.substr(begin, page.find('"', begin) - begin) == "64.0,192.0 304.0,102.0 544.0,12.0");
}

TEST_CASE("log_report without scalars: a line of the iteration alone on each of 2 ranks' log points",
          "[manager]") {
  TempDir tmp("manager_no_scalars");
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 2, .out = tmp.path.string(), .log = &out});
    manager.extend(log_report(), every(1));
    manager.start();
    while (manager.running()) manager.end_iteration();
    manager.finish();
  });
  CHECK(lines_of(tmp.file("metrics.jsonl")) ==
        std::vector<std::string>{"{\"iteration\": 1}", "{\"iteration\": 2}"});
}

TEST_CASE("fid_report: the FID of a generator at 2 ranks, in the log line, equals one process's",
          "[manager][fid]") {
  if (!testing::fashion_mnist_present()) {
    WARN("Fashion-MNIST is not installed (dataset-fashion-mnist): skipping");
    return;
  }
  TempDir tmp("manager_fid");
  const std::string cache = tmp.file("cache"), dir = tmp.file("run");
  const metrics::FidEvaluatorOptions options = {.cache = cache, .samples = 300, .seed = 7};
  // Any deterministic generator of [b, 1, 28, 28] images in [-1, 1] from [b, 784] noise.
  const metrics::GenerateImages generate = [](const Tensor& noise) {
    std::vector<double> pixels = noise.to_vector();
    for (double& p : pixels) p = std::tanh(0.5 * p);
    return Tensor::from_values({noise.size(0), 1, 28, 28}, pixels);
  };
  double alone = 0;
  dist::run_ranks(1, [&](std::shared_ptr<dist::ProcessGroup> world) {
    metrics::FidEvaluator evaluator(options, *world);
    alone = evaluator.evaluate(generate, {784});
  });
  REQUIRE(std::isfinite(alone));
  std::mutex mutex;
  std::vector<double> reported(2);
  std::string printed;
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    metrics::FidEvaluator evaluator(options, *world);
    Manager manager(world, {.iterations = 4, .out = dir, .log = &out});
    auto fid = fid_report(evaluator, generate, {.name = "fid", .noise_shape = {784}});
    manager.extend(log_report(), every(2));
    manager.extend(fid, every(4));  // registered after the log, run before it
    manager.start();
    while (manager.running()) manager.end_iteration([] { return Scalars{{"loss", 1.0}}; });
    manager.finish();
    std::lock_guard lock(mutex);
    reported[world->rank()] = fid->latest();
    if (world->rank() == 0) printed = out.str();
  });
  CHECK(reported[0] == reported[1]);
  CHECK(reported[0] == Approx(alone).epsilon(1e-9));  // float64 sums in another order
  char expected[64];
  std::snprintf(expected, sizeof expected, "{\"iteration\": 4, \"loss\": 1, \"fid\": %.6g}", alone);
  CHECK(lines_of(dir + "/metrics.jsonl") ==
        std::vector<std::string>{"{\"iteration\": 2, \"loss\": 1}", expected});
  CHECK_THAT(printed, Catch::Contains("fid ") && Catch::Contains(" at iteration 4 (features ") &&
                          Catch::Contains(", 300 samples)"));
}

TEST_CASE("Manager::print clears what extensions hold open (the progress line) first, on rank 0 alone",
          "[manager]") {
  TempDir tmp("manager_print");
  struct OpenLine : Extension {
    std::ostream* out = nullptr;
    std::string default_name() const override { return "open_line"; }
    void initialize(Manager& manager) override { out = manager.out(); }
    void run(Manager& /*manager*/) override {
      if (out != nullptr) *out << "[open";
    }
    void before_print() override {
      if (out != nullptr) *out << "]";
    }
  };
  std::vector<std::string> printed(2);
  std::mutex mutex;
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    std::vector<Tensor> x = {Tensor::scalar(0.0)};
    Manager manager(world, {.iterations = 2, .out = tmp.path.string(), .log = &out});
    manager.state().add_tensors("x", x);
    manager.extend(std::make_shared<OpenLine>(), every(1));
    manager.extend(snapshot());  // at the end, after the line was opened at iteration 1
    manager.start();
    while (manager.running()) manager.end_iteration();
    manager.finish();
    std::lock_guard lock(mutex);
    printed[world->rank()] = out.str();
  });
  // Iteration 1 opens a line; at 2 the checkpoint's line clears it before it is written.
  CHECK(printed[0] == "[open]checkpoint: " + checkpoint_path(tmp.path.string(), "checkpoint", 2) + "\n[open");
  CHECK(printed[1].empty());
}

TEST_CASE("sample_grid: rank 0 writes its picture at its iterations; a failure costs only the picture",
          "[manager]") {
  TempDir tmp("manager_samples");
  const std::string dir = tmp.path.string();
  int calls = 0;
  std::string printed;
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 4, .out = dir, .log = &out});
    manager.extend(sample_grid(
                       [&] {
                         ++calls;                                                          // rank 0's alone
                         if (manager.iteration() == 4) return Tensor::zeros({3, 28, 28});  // no batch axis
                         return Tensor::from_values({2, 1, 2, 2}, {-1, 0, 1, 0.5, 1, 1, -1, -1});
                       },
                       {.name = "g", .columns = 2}),
                   every(2, false));
    manager.extend(sample_grid([] { return Tensor::zeros({4, 3, 2, 2}); }, {.name = "rgb"}));  // at the end
    manager.start();
    while (manager.running()) manager.end_iteration();
    manager.finish();
    if (world->rank() == 0) printed = out.str();
  });
  CHECK(calls == 2);
  const std::string png_magic = "\x89PNG\r\n\x1a\n";
  CHECK(read_bytes(dir + "/g-000002.png").substr(0, 8) == png_magic);
  CHECK_FALSE(fs::exists(dir + "/g-000004.png"));  // its images were not a batch: a warning, and on
  CHECK(read_bytes(dir + "/rgb-000004.png").substr(0, 8) == png_magic);
  CHECK_THAT(printed, Catch::Contains("samples: " + dir + "/rgb-000004.png"));
}

TEST_CASE(
    "log_report's page: rewritten while running, the pictures of a sample_grid on it, finished at the end",
    "[manager]") {
  TempDir tmp("manager_page");
  const std::string dir = tmp.path.string();
  std::string printed, while_running;
  dist::run_ranks(2, [&](std::shared_ptr<dist::ProcessGroup> world) {
    std::ostringstream out;
    Manager manager(world, {.iterations = 4, .out = dir, .name = "mygan", .log = &out});
    auto log = log_report();
    manager.extend(log, every(2));
    manager.extend(sample_grid([] { return Tensor::zeros({4, 1, 2, 2}); }, {.report = log.get()}), every(2));
    manager.extend(
        [&](Manager& m) {
          if (m.is_rank0()) while_running = read_bytes(dir + "/report.html");
        },
        every(3, false), "peek");
    manager.start();
    while (manager.running()) manager.end_iteration([&] { return Scalars{{"loss", 1.0}}; });
    manager.finish();
    if (world->rank() == 0) printed = out.str();
  });
  CHECK(while_running.find("<title>mygan (running)</title>") != std::string::npos);
  CHECK(while_running.find("id=\"state\">running</span> iteration 2 of 4") != std::string::npos);
  CHECK(while_running.find("alt=\"samples at iteration 2\"") !=
        std::string::npos);  // after the log: rewritten
  const std::string page = read_bytes(dir + "/report.html");
  CHECK(page.find("id=\"state\">finished</span> iteration 4 of 4") != std::string::npos);
  CHECK(page.find("alt=\"samples at iteration 4\"") != std::string::npos);
  CHECK(page.find("<polyline data-series=\"loss (raw)\"") != std::string::npos);
  CHECK_THAT(printed, Catch::Contains("report: " + dir + "/report.html"));
}
