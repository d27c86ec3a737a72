// The step timeline: the summary's arithmetic on a hand-built trace, the recorder's on/off
// behaviour, and the trace-event text it writes.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/trace.h"
#include "runtime/trace_json.h"
#include "runtime/trace_summary.h"
#include "tests/test_files.h"

using namespace tandem;
using trace::Event;

namespace {

constexpr int kMain = 1, kComm = 2;

// A span of `name`, microseconds given, in nanoseconds.
Event span(const char* category, const char* name, int64_t begin_us, int64_t end_us, int tid,
           std::vector<trace::Arg> args = {}) {
  Event e;
  e.category = category;
  e.name = name;
  e.ts_ns = begin_us * 1000;
  e.dur_ns = (end_us - begin_us) * 1000;
  e.tid = tid;
  e.args = std::move(args);
  return e;
}

std::vector<trace::Arg> of(int64_t sync, const char* phase, int bucket = -1) {
  std::vector<trace::Arg> args = {trace::arg("sync", sync), trace::arg("phase", phase)};
  if (bucket >= 0) args.push_back(trace::arg("bucket", bucket));
  return args;
}

}  // namespace

TEST_CASE("trace summary: overlap, exposed communication and critical-path shares of a hand-built trace",
          "[trace]") {
  const char* d = "m phase 1 (d)";
  const char* g = "m phase 2 (g, d)";
  std::vector<Event> events = {
      // Sync 1 (phase d): agreement 0-100, backward compute 100-700 with two packs and a
      // launch in it, buckets reduced 500-800 and 680-900 on the communication thread,
      // waited for 700-900, unpacked 900-950; the sync ends at 1000.
      span("reducer", trace::kSync, 0, 1000, kMain, of(1, d)),
      span("reducer", trace::kAgreement, 0, 100, kMain, of(1, d)),
      span("autograd", trace::kBackward, 100, 700, kMain),
      span("reducer", trace::kPack, 300, 320, kMain, of(1, d, 0)),
      span("reducer", trace::kPack, 650, 660, kMain, of(1, d, 1)),
      span("reducer", trace::kLaunch, 660, 670, kMain, of(1, d, 1)),
      span("comm", "allreduce (sum)", 500, 800, kComm, of(1, d, 0)),
      span("comm", "allreduce (sum)", 680, 900, kComm, of(1, d, 1)),
      span("comm", "allreduce (sum)", 10, 90, kComm),  // the agreement's collective: no bucket
      span("reducer", trace::kWait, 700, 900, kMain, of(1, d, 0)),
      span("reducer", trace::kUnpack, 900, 950, kMain, of(1, d, 0)),
      // A forward between the backwards: not the Reducer's business.
      span("train", "forward (G step)", 1000, 1500, kMain),
      // Sync 2 (phase g): no overlap at all: the bucket is reduced after the compute.
      span("reducer", trace::kSync, 2000, 2600, kMain, of(2, g)),
      span("autograd", trace::kBackward, 2000, 2400, kMain),
      span("comm", "allreduce (sum)", 2400, 2500, kComm, of(2, g, 0)),
      span("reducer", trace::kWait, 2400, 2500, kMain, of(2, g, 0)),
      // Sync 3 (phase d again): the bucket reduced entirely inside the compute.
      span("reducer", trace::kSync, 3000, 3500, kMain, of(3, d)),
      span("autograd", trace::kBackward, 3000, 3400, kMain),
      span("comm", "allreduce (sum)", 3100, 3200, kComm, of(3, d, 0)),
  };
  events.push_back(
      Event{.phase = 'C', .category = "counter", .name = "bytes in flight", .value = 4, .args = {}});

  const std::vector<trace::PhaseSummary> phases = trace::summarize(events);
  REQUIRE(phases.size() == 2);
  const trace::PhaseSummary& pd = phases[0];
  CHECK(pd.phase == d);
  CHECK(pd.steps == 2);
  // Reductions inside the compute: 200 + 20 (sync 1) + 100 (sync 3) of 300 + 220 + 100.
  CHECK(pd.reduce_ns == 620'000);
  CHECK(pd.overlapped_ns == 320'000);
  CHECK(pd.overlap_fraction() == 320.0 / 620.0);
  CHECK(pd.exposed_ns == 300'000 + 100'000);
  CHECK(pd.ms_per_step(pd.exposed_ns) == 0.2);
  CHECK(pd.sync_ns == 1'500'000);
  CHECK(pd.compute_ns == 560'000 + 400'000);  // the backwards less the Reducer's work in them
  CHECK(pd.comm_ns == 200'000);               // waits
  CHECK(pd.reducer_ns == 100'000 + 30'000 + 10'000 + 50'000);  // agreement, packs, launch, unpack
  CHECK(pd.agreement_ns == 100'000);
  CHECK(pd.share(pd.comm_ns) == 200.0 / 1500.0);

  const trace::PhaseSummary& pg = phases[1];
  CHECK(pg.phase == g);
  CHECK(pg.steps == 1);
  CHECK(pg.overlap_fraction() == 0.0);
  CHECK(pg.exposed_ns == 200'000);
  CHECK(trace::summary_line(pg).find("m phase 2 (g, d): 1 synced backwards; overlap 0% of 0.100 ms") !=
        std::string::npos);
}

TEST_CASE("trace recorder: nothing while off, spans and arguments while on", "[trace]") {
  trace::start(3);
  trace::stop();
  {
    trace::Span off("train", "off");
    CHECK_FALSE(off.on());
  }
  trace::start(3);  // clears
  CHECK(trace::take_events().empty());
  {
    trace::Span on("train", "step");
    REQUIRE(on.on());
    on.set_args({trace::arg("iteration", 7)});
  }
  {
    trace::ScopedArgs outer({trace::arg("bucket", 1)});
    {
      trace::ScopedArgs inner({trace::arg("bucket", 2)});
      CHECK(trace::find_arg(trace::current_args(), "bucket")->number == 2);
    }
    CHECK(trace::find_arg(trace::current_args(), "bucket")->number == 1);
  }
  CHECK(trace::current_args().empty());
  trace::set_enabled(false);
  { trace::Span paused("train", "paused"); }
  const std::vector<Event> events = trace::take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == "step");
  CHECK(events[0].pid == 3);
  CHECK(events[0].tid == trace::thread_id());
  CHECK(events[0].dur_ns >= 0);
  CHECK(trace::find_arg(events[0].args, "iteration")->number == 7);
}

namespace {

// Synced backward k as the Reducer, the engine and the communication thread record it,
// microseconds from its start; its compute's length varies with k, so that steps differ.
std::vector<Event> synced_backward(int64_t k) {
  const char* phase = k % 2 == 1 ? "d" : "g";
  const int64_t c = 100 + 37 * (k % 7);
  return {
      span("reducer", trace::kAgreement, 0, 20, kMain, of(k, phase)),
      span("reducer", trace::kLaunch, c - 10, c, kMain, of(k, phase, 0)),
      span("autograd", trace::kBackward, 20, c, kMain),
      span("comm", "allreduce (sum)", c - 10, c + 200, kComm, of(k, phase, 0)),
      span("reducer", trace::kWait, c, c + 200, kMain, of(k, phase, 0)),
      span("reducer", trace::kUnpack, c + 200, c + 250, kMain, of(k, phase, 0)),
      span("reducer", trace::kSync, 0, c + 300, kMain, of(k, phase)),
  };
}

std::vector<int64_t> figures(const trace::PhaseSummary& p) {
  return {p.steps,      p.sync_ns, p.reduce_ns,  p.overlapped_ns, p.exposed_ns,
          p.compute_ns, p.comm_ns, p.reducer_ns, p.agreement_ns};
}

// An event named `name` that began at `ts_ns`.
Event at(const char* name, int64_t ts_ns, int tid) {
  Event e;
  e.name = name;
  e.ts_ns = ts_ns;
  e.tid = tid;
  return e;
}

}  // namespace

TEST_CASE("trace recorder: the last N steps kept, memory bounded, the dropped ones summarized on the way",
          "[trace]") {
  constexpr int64_t kKeep = 5, kSteps = 400, kPerStep = 7;
  std::vector<trace::PhaseSummary> dropped;
  int64_t dropped_events = 0;
  trace::start(0, {.steps = kKeep, .on_drop = [&](const std::vector<Event>& events) {
                     dropped_events += static_cast<int64_t>(events.size());
                     trace::merge(dropped, trace::summarize(events));
                   }});
  std::vector<Event> all;  // what a recorder that keeps everything would hold
  int64_t full_bytes = 0, most_events = 0, most_bytes = 0, base = 0;
  for (int64_t k = 1; k <= kSteps; ++k) {
    trace::begin_step(k);
    // In its step and after the one before: one thread's synced backwards do not overlap.
    base = std::max(trace::now_ns(), base + 1'000'000);
    for (Event e : synced_backward(k)) {
      e.ts_ns += base;
      all.push_back(e);
      trace::record(std::move(e));
    }
    const trace::Retention kept = trace::retention();
    if (k == kKeep) full_bytes = kept.bytes;
    most_events = std::max(most_events, kept.events);
    most_bytes = std::max(most_bytes, kept.bytes);
  }
  trace::stop();
  const trace::Retention kept = trace::retention();
  CHECK(most_events == kKeep * kPerStep);
  CHECK(full_bytes >= kKeep * kPerStep * static_cast<int64_t>(sizeof(Event)));
  CHECK(most_bytes == full_bytes);  // 80 times the steps, not a byte more held
  CHECK(kept.steps == kKeep);
  CHECK(kept.first_step == kSteps - kKeep + 1);
  CHECK(kept.dropped_steps == kSteps - kKeep + 1);  // the (empty) one before the first step too
  CHECK(kept.late_events == 0);
  CHECK(dropped_events + kept.events == static_cast<int64_t>(all.size()));

  const std::vector<Event> events = trace::take_events();
  REQUIRE(events.size() == static_cast<size_t>(kKeep * kPerStep));
  std::vector<int64_t> syncs;  // the kept synced backwards: the last ones
  for (const Event& e : events) {
    if (e.name == trace::kSync) syncs.push_back(trace::find_arg(e.args, "sync")->number);
  }
  CHECK(syncs == std::vector<int64_t>{396, 397, 398, 399, 400});

  // The dropped steps' summaries and the kept ones' make the whole run's.
  std::vector<trace::PhaseSummary> merged = dropped;
  trace::merge(merged, trace::summarize(events));
  const std::vector<trace::PhaseSummary> whole = trace::summarize(all);
  REQUIRE(whole.size() == 2);
  REQUIRE(merged.size() == whole.size());
  for (size_t p = 0; p < whole.size(); ++p) {
    CHECK(merged[p].phase == whole[p].phase);
    CHECK(figures(merged[p]) == figures(whole[p]));
  }
  CHECK(whole[0].steps == kSteps / 2);
  trace::start(0);  // unbounded again, on_drop's captures forgotten
  trace::stop();
}

TEST_CASE("trace recorder: an event joins the step it began in, late ones flushed in before a drop",
          "[trace]") {
  std::vector<std::string> dropped;
  trace::start(0, {.steps = 2, .on_drop = [&](const std::vector<Event>& events) {
                     for (const Event& e : events) dropped.push_back(e.name);
                   }});
  trace::begin_step(1);
  const int64_t in_1 = trace::now_ns();
  trace::record(at("in 1", in_1, kMain));
  trace::begin_step(2);  // drops the one before step 1 (empty)
  CHECK(dropped.empty());
  // Spans of step 1 that complete asynchronously (a GPU stream's): one recorded late, one
  // that only a flush brings in; both reach on_drop with step 1.
  trace::record(at("late, in 1", in_1 + 1, kComm));
  trace::record(at("in 2", trace::now_ns(), kMain));
  bool flushed = false;
  trace::add_flusher(&flushed, [&] {
    if (!flushed) trace::record(at("flushed, in 1", in_1 + 2, kComm));
    flushed = true;
  });
  trace::begin_step(3);
  trace::remove_flusher(&flushed);
  CHECK(dropped == std::vector<std::string>{"in 1", "late, in 1", "flushed, in 1"});
  trace::record(at("too late, in 1", in_1 + 3, kComm));
  trace::stop();
  trace::begin_step(4);  // off: no step
  const trace::Retention kept = trace::retention();
  CHECK(kept.steps == 2);
  CHECK(kept.first_step == 2);
  CHECK(kept.late_events == 1);
  const std::vector<Event> events = trace::take_events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].name == "in 2");
  trace::start(0);
  trace::stop();
}

TEST_CASE("trace JSON: trace-event objects in microseconds, one file, a named error when unwritable",
          "[trace]") {
  Event x =
      span("reducer", "pack", 0, 0, 5, {trace::arg("phase", "a \"quoted\" name"), trace::arg("bucket", 2)});
  x.ts_ns = 1'234'567;
  x.dur_ns = 8'001;
  Event c{.phase = 'C',
          .category = "counter",
          .name = "bytes in flight",
          .ts_ns = 2'000,
          .tid = 5,
          .value = 4096,
          .args = {}};
  const std::string text = trace::events_json({x, c}, {{5, "main"}}, 1);
  CHECK(text.find(R"({"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"rank 1"}})") !=
        std::string::npos);
  CHECK(text.find(R"({"ph":"M","name":"thread_name","pid":1,"tid":5,"args":{"name":"main"}})") !=
        std::string::npos);
  CHECK(text.find(R"({"ph":"X","cat":"reducer","name":"pack","pid":1,"tid":5,"ts":1234.567,"dur":8.001,)"
                  R"("args":{"phase":"a \"quoted\" name","bucket":2}})") != std::string::npos);
  CHECK(text.find(R"({"ph":"C","cat":"counter","name":"bytes in flight","pid":1,"tid":5,"ts":2.000,)"
                  R"("args":{"value":4096}})") != std::string::npos);

  const std::string path = "test_trace_out.json";
  trace::write_trace_file(path, {text, "", text});
  std::ifstream in(path);
  std::stringstream whole;
  whole << in.rdbuf();
  CHECK(whole.str().rfind("{\"traceEvents\":[\n", 0) == 0);
  CHECK(whole.str().find("}},\n{\"ph\":\"M\",\"name\":\"process_name\"") !=
        std::string::npos);  // parts joined
  std::remove(path.c_str());
  CHECK_THROWS_WITH(trace::write_trace_file("no-such-dir/t.json", {text}),
                    Catch::Contains("--trace: cannot write no-such-dir/t.json.tmp"));
}

namespace {

struct stat status_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st;
}

}  // namespace

TEST_CASE("trace JSON: devices and FIFOs are written in place, never replaced", "[trace]") {
  testing::TempDir dir("trace_devices");
  const std::string part = trace::events_json({}, {}, 0);

  SECTION("a FIFO stays a FIFO and its reader gets the trace") {
    const std::string fifo = dir.file("fifo");
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    trace::check_trace_file(fifo);  // no reader yet: checked, not opened (opening would block)
    std::string received;
    std::thread reader([&] { received = testing::read_bytes(fifo); });
    trace::write_trace_file(fifo, {part});
    reader.join();
    CHECK(received.rfind("{\"traceEvents\":[\n", 0) == 0);
    CHECK(received.find(part) != std::string::npos);
    CHECK(S_ISFIFO(status_of(fifo).st_mode));
  }
  SECTION("a character device made with mknod stays one (root only)") {
    const std::string node = dir.file("null");
    if (::geteuid() != 0 || ::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
      WARN("cannot make a device node here (not root, or no CAP_MKNOD): case not run");
      return;
    }
    trace::check_trace_file(node);
    trace::write_trace_file(node, {part});
    const struct stat st = status_of(node);
    CHECK(S_ISCHR(st.st_mode));
    CHECK(st.st_rdev == makedev(1, 3));
  }
  SECTION("/dev/null stays a character device") {
    trace::check_trace_file("/dev/null");
    trace::write_trace_file("/dev/null", {part});
    CHECK(S_ISCHR(status_of("/dev/null").st_mode));
  }
  SECTION("a directory is refused by name") {
    CHECK_THROWS_WITH(trace::write_trace_file(dir.path.string(), {part}),
                      Catch::Contains("--trace: " + dir.path.string() + " is a directory"));
  }
}
