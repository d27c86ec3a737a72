// The step timeline: the summary's arithmetic on a hand-built trace, the recorder's on/off
// behaviour, and the trace-event text it writes.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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
