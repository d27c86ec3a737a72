// reducer_bench: the Reducer against one plain allreduce of the same bytes.
//
//   mpirun -np 2 --oversubscribe build/bin/reducer_bench [--iters N] [--warmup N]
//       [--sets mlp,dcgan,25m] [--caps 1,5,25,100] [--compute-factor 2] [--json FILE]
//
// Gradient sets shaped like real models: the parameter lists of the `mlp` and `dcgan` GANs
// (taken from make_gan) and a deterministic 25 M-parameter set of 160 tensors of mixed
// sizes. The Reducer is fed by a real backward with no compute: one autograd node whose
// inputs are all the parameters returns no gradient tensors, so the engine runs every
// leaf's AccumulateGrad, which fires the grad-ready hooks (the Reducer's among them) with
// the gradient already stored in the leaf, in reverse registration order, exactly as a
// backward through a model would. Gradients hold rank + 1 before each backward and must
// hold the average (n + 1) / 2 after it; a wrong value makes the program exit 1.
//
// Per set and bucket cap, interleaved iteration by iteration (median of --iters, each
// iteration's time the maximum over ranks):
//   reducer  time of backward(): backward begin (incl. the used-set agreement) to every
//            gradient averaged and written back;
//   plain    one ProcessGroup allreduce (sum) of one flat tensor of the same total bytes;
//   raw      one MPI_Allreduce (sum) of the same bytes from the main thread;
//   ratio    reducer / plain.
// Gradients: "copy" (the default: averages copied back into the gradients) at every cap,
// and "view" (gradient_as_bucket_view: gradients become views of the buckets, so after the
// first backward nothing is copied in or out) at the default cap.
// Overlap: a grad-ready hook registered before the Reducer's busy-waits a stated time per
// tensor (so total compute >= --compute-factor x the plain allreduce time). exposed =
// median(backward with the Reducer) - median(the same busy-waits on twin leaves no Reducer
// watches); reported as a fraction of the plain allreduce time (target <= 20%).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "bench/bench_common.h"
#include "bench/bench_harness.h"
#include "models/gan.h"
#include "reducer/reducer.h"
#include "runtime/command_line.h"
#include "runtime/dist/mpi_check.h"
#include "runtime/dist/process_group.h"

using namespace tandem;

namespace {

using Clock = std::chrono::steady_clock;

const double kDefaultCapMb = ReducerOptions{}.bucket_cap_mb;

struct Options {
  int iters = 20;
  int warmup = 3;
  std::vector<std::string> sets = {"mlp", "dcgan", "25m"};
  std::vector<double> caps = {1, 5, 25, 100};
  double compute_factor = 2.0;
  std::string json;
};

struct GradSet {
  std::string name;
  std::vector<std::string> names;
  std::vector<Shape> shapes;
  int64_t count = 0;  // elements over all tensors
};

GradSet gan_set(const std::string& model) {
  models::GanConfig config;
  config.model = model;
  auto gan = models::make_gan(config);
  GradSet set;
  set.name = model;
  for (const auto& [name, p] : gan->named_parameters()) {
    if (!p.requires_grad()) continue;
    set.names.push_back(name);
    set.shapes.push_back(p.shape());
    set.count += p.numel();
  }
  return set;
}

// 80 (weight, bias) pairs: weight [rows, 256], bias [rows], rows = 240 * (1 + 7i mod 9),
// registered as layer<i>.weight, layer<i>.bias (about 24.7 M elements, 160 tensors).
GradSet synthetic_set() {
  GradSet set;
  set.name = "25m";
  for (int i = 0; i < 80; ++i) {
    int64_t rows = 240 * (1 + (7 * i) % 9);
    set.names.push_back("model.layer" + std::to_string(i) + ".weight");
    set.shapes.push_back({rows, 256});
    set.names.push_back("model.layer" + std::to_string(i) + ".bias");
    set.shapes.push_back({rows});
    set.count += rows * 256 + rows;
  }
  return set;
}

// Leaves of a set, each with a defined gradient the backward leaves in place.
struct Leaves {
  std::vector<Variable> params;
  std::vector<std::string> names;

  Leaves(const GradSet& set, const std::vector<Tensor>* share_grads = nullptr) {
    for (size_t i = 0; i < set.shapes.size(); ++i) {
      Variable v(Tensor::zeros(set.shapes[i]), true);
      v.set_name(set.names[i]);
      v.set_grad(share_grads ? (*share_grads)[i] : Tensor::zeros(set.shapes[i]));
      params.push_back(v);
      names.push_back(set.names[i]);
    }
  }
  std::vector<Tensor> grads() const {
    std::vector<Tensor> out;
    for (const auto& p : params) out.push_back(p.grad());
    return out;
  }
  void fill_grads(double value) {
    for (auto& p : params) {
      Tensor g = p.grad();
      g.fill_(value);
    }
  }
  int64_t count_wrong(float expected) const {
    int64_t wrong = 0;
    for (const auto& p : params) {
      const float* g = p.grad().data<float>();
      for (int64_t k = 0, n = p.numel(); k < n; ++k) wrong += g[k] != expected;
    }
    return wrong;
  }
};

// One backward that reaches every leaf and computes nothing: the node hands no gradient to
// the leaves' accumulators, which then fire the hooks with the stored gradients.
void feed_backward(const std::vector<Variable>& params) {
  const size_t count = params.size();
  Variable root =
      make_result(Tensor::scalar(0.0), "GradFeed", params,
                  [count](const Tensor&, const FunctionNode&) { return std::vector<Tensor>(count); });
  root.backward();
}

void busy_wait(double us) {
  auto until = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < until) {
  }
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void barrier() { TANDEM_CHECK_MPI(MPI_Barrier(MPI_COMM_WORLD)); }

// Per iteration, the maximum over ranks; then the median.
double median_of_max(std::vector<double> local) {
  std::vector<double> global(local.size());
  TANDEM_CHECK_MPI(MPI_Allreduce(local.data(), global.data(), static_cast<int>(local.size()), MPI_DOUBLE,
                                 MPI_MAX, MPI_COMM_WORLD));
  std::sort(global.begin(), global.end());
  size_t n = global.size();
  return n % 2 ? global[n / 2] : 0.5 * (global[n / 2 - 1] + global[n / 2]);
}

int64_t count_wrong(const Tensor& t, float expected) {
  const float* p = t.data<float>();
  int64_t wrong = 0;
  for (int64_t k = 0, n = t.numel(); k < n; ++k) wrong += p[k] != expected;
  return wrong;
}

// The plain baselines on one flat buffer of the set's bytes.
struct Flat {
  Tensor buffer;
  double plain(dist::ProcessGroup& group, double value, int64_t& wrong) {
    buffer.fill_(value);
    barrier();
    auto t0 = Clock::now();
    group.allreduce(buffer, dist::ReduceOp::sum, "plain allreduce")->wait();
    double t = seconds(t0, Clock::now());
    wrong += count_wrong(buffer, static_cast<float>(group.size() * (group.size() + 1) / 2.0));
    return t;
  }
  double raw(int n, double value, int64_t& wrong) {
    buffer.fill_(value);
    barrier();
    auto t0 = Clock::now();
    TANDEM_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buffer.raw_data(), static_cast<int>(buffer.numel()),
                                   MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    double t = seconds(t0, Clock::now());
    wrong += count_wrong(buffer, static_cast<float>(n * (n + 1) / 2.0));
    return t;
  }
};

struct Row {
  std::string set;
  bool view = false;  // gradient_as_bucket_view
  double cap_mb = 0;
  size_t tensors = 0;
  size_t bytes = 0;
  size_t buckets = 0;
  double reducer_ms = 0, plain_ms = 0, raw_ms = 0, bucketed_ms = 0;
  int64_t wrong = 0;
};

// The same bytes as plain allreduces (sum) of the Reducer's bucket sizes, issued back to
// back and waited for: the message sizes the Reducer sends, without hooks or copies.
double bucketed_plain(dist::ProcessGroup& group, std::vector<Tensor>& buckets, double value, int64_t& wrong) {
  for (auto& b : buckets) b.fill_(value);
  barrier();
  auto t0 = Clock::now();
  std::vector<std::shared_ptr<dist::Work>> works;
  for (auto& b : buckets)
    works.push_back(group.allreduce(b, dist::ReduceOp::sum, "bucketed plain allreduce"));
  for (auto& w : works) w->wait();
  double t = seconds(t0, Clock::now());
  const int n = group.size();
  for (auto& b : buckets) wrong += count_wrong(b, static_cast<float>(n * (n + 1) / 2.0));
  return t;
}

struct OverlapRow {
  std::string set;
  bool view = false;
  double cap_mb = 0;
  double us_per_tensor = 0;
  double compute_ms = 0;  // the busy-waits alone (twin leaves, no Reducer)
  double with_ms = 0;     // the busy-waits with the Reducer
  double plain_ms = 0;
  double bucketed_ms = 0;
  int64_t wrong = 0;
  double exposed_ms() const { return with_ms - compute_ms; }
  double fraction() const { return exposed_ms() / plain_ms; }
  double fraction_bucketed() const { return exposed_ms() / bucketed_ms; }
};

Row run_sweep_point(const GradSet& set, double cap, bool view, const Options& o,
                    std::shared_ptr<dist::ProcessGroup> group) {
  const int n = group->size();
  const double mine = group->rank() + 1, average = (n + 1) / 2.0;
  Leaves leaves(set);
  ReducerOptions ro;
  ro.bucket_cap_mb = cap;
  ro.gradient_as_bucket_view = view;
  ro.name = set.name;
  Reducer reducer(leaves.params, leaves.names, group, ro);
  Flat flat{Tensor::empty({set.count})};
  int64_t wrong = 0;
  for (int i = 0; i < o.warmup; ++i) {  // the first backwards build, then rebuild the layout
    leaves.fill_grads(mine);
    feed_backward(leaves.params);
    int64_t ignored = 0;
    flat.plain(*group, mine, ignored);
    flat.raw(n, mine, ignored);
  }
  std::vector<Tensor> buckets;
  const std::vector<PhaseStats> layout = reducer.stats();
  for (size_t bytes : layout.back().bucket_bytes)
    buckets.push_back(Tensor::empty({static_cast<int64_t>(bytes / 4)}));
  std::vector<double> t_reducer, t_plain, t_raw, t_bucketed;
  for (int i = 0; i < o.iters; ++i) {
    leaves.fill_grads(mine);
    barrier();
    auto t0 = Clock::now();
    feed_backward(leaves.params);
    t_reducer.push_back(seconds(t0, Clock::now()));
    wrong += leaves.count_wrong(static_cast<float>(average));
    t_plain.push_back(flat.plain(*group, mine, wrong));
    t_raw.push_back(flat.raw(n, mine, wrong));
    t_bucketed.push_back(bucketed_plain(*group, buckets, mine, wrong));
  }
  Row row;
  row.set = set.name;
  row.view = view;
  row.cap_mb = cap;
  row.tensors = set.shapes.size();
  row.bytes = reducer.last_backward_bytes();
  auto stats = reducer.stats();
  row.buckets = stats.empty() ? 0 : stats.back().bucket_bytes.size();
  row.reducer_ms = 1e3 * median_of_max(t_reducer);
  row.plain_ms = 1e3 * median_of_max(t_plain);
  row.raw_ms = 1e3 * median_of_max(t_raw);
  row.bucketed_ms = 1e3 * median_of_max(t_bucketed);
  row.wrong = bench::sum_over_ranks(wrong);
  return row;
}

OverlapRow run_overlap(const GradSet& set, double cap, bool view, double plain_ms, double bucketed_ms,
                       const Options& o, std::shared_ptr<dist::ProcessGroup> group) {
  const int n = group->size();
  const double mine = group->rank() + 1, average = (n + 1) / 2.0;
  // Per tensor so that the total is compute_factor x the plain allreduce (at least 10 us).
  const double us =
      std::max(10.0, std::ceil(o.compute_factor * plain_ms * 1e3 / static_cast<double>(set.shapes.size())));
  Leaves leaves(set);
  std::vector<Tensor> grads = leaves.grads();
  Leaves twins(set, &grads);  // same gradients, no Reducer
  for (auto& p : leaves.params) p.add_grad_ready_hook([us](Variable&) { busy_wait(us); });
  for (auto& p : twins.params) p.add_grad_ready_hook([us](Variable&) { busy_wait(us); });
  ReducerOptions ro;
  ro.bucket_cap_mb = cap;
  ro.gradient_as_bucket_view = view;
  ro.name = set.name;
  Reducer reducer(leaves.params, leaves.names, group, ro);  // its hooks run after the busy-waits
  int64_t wrong = 0;
  for (int i = 0; i < o.warmup; ++i) {
    leaves.fill_grads(mine);
    feed_backward(leaves.params);
    feed_backward(twins.params);
  }
  std::vector<double> t_with, t_alone;
  for (int i = 0; i < o.iters; ++i) {
    leaves.fill_grads(mine);
    barrier();
    auto t0 = Clock::now();
    feed_backward(leaves.params);
    t_with.push_back(seconds(t0, Clock::now()));
    wrong += leaves.count_wrong(static_cast<float>(average));
    barrier();
    t0 = Clock::now();
    feed_backward(twins.params);
    t_alone.push_back(seconds(t0, Clock::now()));
  }
  OverlapRow row;
  row.set = set.name;
  row.view = view;
  row.cap_mb = cap;
  row.us_per_tensor = us;
  row.with_ms = 1e3 * median_of_max(t_with);
  row.compute_ms = 1e3 * median_of_max(t_alone);
  row.plain_ms = plain_ms;
  row.bucketed_ms = bucketed_ms;
  row.wrong = bench::sum_over_ranks(wrong);
  return row;
}

void write_json(const std::string& path, int ranks, int iters, const std::vector<Row>& rows,
                const std::vector<OverlapRow>& overlaps, int64_t wrong) {
  std::ofstream js(path);
  js << "{\"ranks\": " << ranks << ", \"iters\": " << iters << ", \"sweep\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    js << (i ? ", " : "") << "{\"set\": \"" << r.set << "\", \"view\": " << (r.view ? "true" : "false")
       << ", \"cap_mb\": " << r.cap_mb << ", \"tensors\": " << r.tensors << ", \"bytes\": " << r.bytes
       << ", \"buckets\": " << r.buckets << ", \"reducer_ms\": " << r.reducer_ms
       << ", \"plain_ms\": " << r.plain_ms << ", \"raw_ms\": " << r.raw_ms
       << ", \"ratio\": " << r.reducer_ms / r.plain_ms << ", \"bucketed_ms\": " << r.bucketed_ms
       << ", \"ratio_bucketed\": " << r.reducer_ms / r.bucketed_ms << "}";
  }
  js << "], \"overlap\": [";
  for (size_t i = 0; i < overlaps.size(); ++i) {
    const OverlapRow& r = overlaps[i];
    js << (i ? ", " : "") << "{\"set\": \"" << r.set << "\", \"view\": " << (r.view ? "true" : "false")
       << ", \"cap_mb\": " << r.cap_mb << ", \"us_per_tensor\": " << r.us_per_tensor
       << ", \"compute_ms\": " << r.compute_ms << ", \"with_comm_ms\": " << r.with_ms
       << ", \"exposed_ms\": " << r.exposed_ms() << ", \"plain_ms\": " << r.plain_ms
       << ", \"exposed_fraction\": " << r.fraction() << ", \"bucketed_ms\": " << r.bucketed_ms
       << ", \"exposed_fraction_bucketed\": " << r.fraction_bucketed() << "}";
  }
  js << "], \"wrong\": " << wrong << "}\n";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::vector<std::string> set_names = models::gan_model_names();
  set_names.push_back("25m");
  CommandLine cl(
      "reducer_bench",
      "The Reducer against one plain allreduce of the same bytes, per gradient set and bucket cap,\n"
      "and the communication a backward with compute leaves exposed; run it under mpirun.");
  cl.add("--iters", &o.iters, "timed iterations; the median is reported", 1);
  cl.add("--warmup", &o.warmup, "untimed iterations first", 0);
  cl.add_list("--sets", &o.sets, "gradient sets: GAN parameter lists, or 25m synthetic tensors", set_names);
  cl.add_list("--caps", &o.caps, "bucket caps in MB", 0);
  cl.add("--compute-factor", &o.compute_factor, "overlap busy-wait in total, times the plain allreduce", 0);
  cl.add("--json", &o.json, "also write the results as JSON here", "FILE");
  cl.parse(argc, argv);
  int64_t total_wrong = 0;
  std::vector<Row> rows;
  std::vector<OverlapRow> overlaps;
  bench::Bench plugin{
      .name = "reducer_bench", .backend = dist::Backend::mpi, .wrong_label = "Out of bounds values"};
  plugin.header = [&](const bench::World& world) {
    std::printf(
        "# reducer_bench: %d ranks, float32, %d iterations after %d warm-up; median over iterations of "
        "the\n"
        "# maximum over ranks. reducer = backward() from begin to every gradient averaged and written "
        "back;\n"
        "# plain = one ProcessGroup allreduce (sum) of the same bytes; raw = one MPI_Allreduce; ratio = "
        "reducer / plain;\n"
        "# bucketed = plain allreduces of the Reducer's bucket sizes, back to back; ratio_b = reducer / "
        "bucketed\n#\n",
        world.size, o.iters, o.warmup);
    bench::print_columns({{6, "set"},
                          {5, "grads"},
                          {8, "cap", "(MB)"},
                          {8, "tensors"},
                          {12, "bytes", "(B)"},
                          {8, "buckets"},
                          {11, "reducer", "(ms)"},
                          {11, "plain", "(ms)"},
                          {11, "raw", "(ms)"},
                          {7, "ratio"},
                          {11, "bucketed", "(ms)"},
                          {7, "ratio_b"},
                          {7, "#wrong"}});
  };
  plugin.rows = [&](const bench::World& world) {
    std::vector<GradSet> sets;
    for (const auto& s : o.sets) {
      if (s == "25m")
        sets.push_back(synthetic_set());
      else
        sets.push_back(gan_set(s));
    }
    for (const auto& set : sets) {
      double plain_at_default = 0, bucketed_at_default = 0;
      // Every cap with gradients copied out of the buckets (the default), then the default
      // cap with gradient_as_bucket_view (no copy back).
      std::vector<std::pair<double, bool>> points;
      for (double cap : o.caps) points.emplace_back(cap, false);
      points.emplace_back(kDefaultCapMb, true);
      for (auto [cap, view] : points) {
        Row r = run_sweep_point(set, cap, view, o, world.group);
        total_wrong += r.wrong;
        if ((cap == kDefaultCapMb && !view) || plain_at_default == 0) {
          plain_at_default = r.plain_ms;
          bucketed_at_default = r.bucketed_ms;
        }
        rows.push_back(r);
        if (world.root()) {
          std::printf("  %6s %5s %8.0f %8zu %12zu %8zu %11.3f %11.3f %11.3f %7.3f %11.3f %7.3f %7lld\n",
                      r.set.c_str(), r.view ? "view" : "copy", r.cap_mb, r.tensors, r.bytes, r.buckets,
                      r.reducer_ms, r.plain_ms, r.raw_ms, r.reducer_ms / r.plain_ms, r.bucketed_ms,
                      r.reducer_ms / r.bucketed_ms, static_cast<long long>(r.wrong));
          std::fflush(stdout);
        }
      }
      for (bool view : {false, true}) {
        overlaps.push_back(
            run_overlap(set, kDefaultCapMb, view, plain_at_default, bucketed_at_default, o, world.group));
        total_wrong += overlaps.back().wrong;
      }
    }
    if (world.root()) {
      std::printf(
          "#\n# overlap at cap 25 MB: a busy-wait per tensor before the Reducer's hook; compute = the same\n"
          "# busy-waits alone (twin leaves); exposed = with - compute; fraction = exposed / plain (target <= "
          "0.20);\n"
          "# fraction_b = exposed / bucketed plain\n#\n");
      bench::print_columns({{6, "set"},
                            {5, "grads"},
                            {10, "wait", "(us/tens)"},
                            {11, "compute", "(ms)"},
                            {11, "with comm", "(ms)"},
                            {11, "exposed", "(ms)"},
                            {11, "plain", "(ms)"},
                            {9, "fraction"},
                            {11, "bucketed", "(ms)"},
                            {10, "fraction_b"},
                            {7, "#wrong"}});
      for (const auto& r : overlaps) {
        std::printf("  %6s %5s %10.0f %11.3f %11.3f %11.3f %11.3f %9.3f %11.3f %10.3f %7lld\n", r.set.c_str(),
                    r.view ? "view" : "copy", r.us_per_tensor, r.compute_ms, r.with_ms, r.exposed_ms(),
                    r.plain_ms, r.fraction(), r.bucketed_ms, r.fraction_bucketed(),
                    static_cast<long long>(r.wrong));
      }
    }
    return total_wrong;
  };
  plugin.footer = [&](const bench::World& world, int64_t wrong) {
    if (!o.json.empty()) write_json(o.json, world.size, o.iters, rows, overlaps, wrong);
  };
  return bench::run_bench(plugin);
}
