// What rank 0 reports: progress lines and summary lines against strings written out by
// hand, and metrics.jsonl lines read back by an independent JSON reader.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "models/train/metrics_log.h"
#include "models/training/scalar_log.h"
#include "tests/test_files.h"
#include "tests/training/json_reader.h"

using namespace tandem;
using namespace tandem::models;
using namespace tandem::testing;

namespace {

LogPoint ring8_point() {
  LogPoint p;
  p.iteration = 50;
  p.total = 200;
  p.ms_per_step = 0.5;
  p.loss_d = 1.0254731;
  p.loss_g = 0.78742099;
  p.bytes_per_step = 218128.9;
  p.rss_mb = {16.6216, 16.2775};
  return p;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string line_of(int64_t iteration) {
  LogPoint p = ring8_point();
  p.iteration = iteration;
  return metrics_json(p) + "\n";
}

// What the code under test writes to file descriptor 2 while it lives.
class StderrCapture {
 public:
  explicit StderrCapture(const std::string& path) : saved_(dup(2)) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() {
    dup2(saved_, 2);
    close(saved_);
  }

 private:
  int saved_;
};

std::set<std::string> keys(const JsonValue& object) {
  std::set<std::string> out;
  for (const auto& [key, value] : object.members) out.insert(key);
  return out;
}

}  // namespace

TEST_CASE("durations and byte counts read as people write them", "[metrics]") {
  CHECK(training::format_duration(0) == "0s");
  CHECK(training::format_duration(59.4) == "59s");
  CHECK(training::format_duration(59.5) == "1m0s");
  CHECK(training::format_duration(3600) == "1h0m0s");
  CHECK(training::format_duration(3725) == "1h2m5s");
  CHECK(training::format_duration(-3) == "0s");
  CHECK(training::format_bytes(999) == "1.0 kB");
  CHECK(training::format_bytes(218128) == "218.1 kB");
  CHECK(training::format_bytes(999999) == "1000.0 kB");
  CHECK(training::format_bytes(1e6) == "1.00 MB");
  CHECK(training::format_bytes(3.27e6) == "3.27 MB");
}

TEST_CASE("the progress line", "[metrics]") {
  // 1000 / 0.5 ms = 2000 it/s; 150 steps left * 0.5 ms = 0.075 s -> 0s.
  CHECK(
      progress_line(ring8_point()) ==
      "iter     50/200  2000.0 it/s  0.5 ms/step  ETA 0s  loss_d 1.0255  loss_g 0.7874  sync 218.1 kB/step  "
      "rss 16.6/16.3 MB");
  // 1000 / 37.5 = 26.67 it/s; 98766 steps left * 37.5 ms = 3703.7 s = 1h1m44s.
  LogPoint p{.iteration = 1234,
             .total = 100000,
             .ms_per_step = 37.5,
             .loss_d = -0.04,
             .loss_g = 2.00045,
             .bytes_per_step = 3.27e6,
             .structure = "stage 1 (14x14), fade-in",
             .skipped_steps = 2,
             .rss_mb = {1234.56}};
  CHECK(progress_line(p) ==
        "iter   1234/100000  26.7 it/s  37.5 ms/step  ETA 1h1m44s  loss_d -0.0400  loss_g 2.0004  sync 3.27 "
        "MB/step  "
        "[stage 1 (14x14), fade-in]  skipped 2 non-finite step(s)  rss 1234.6 MB");
}

TEST_CASE("an fp16 run's loss scales and skipped steps print as whole numbers", "[metrics]") {
  LogPoint p = ring8_point();
  p.terms = {{"scale_g", 32768.0}, {"scale_d", 65536.0}, {"skipped_g", 3.0}, {"skipped_d", 0.0}};
  CHECK(progress_line(p) ==
        "iter     50/200  2000.0 it/s  0.5 ms/step  ETA 0s  loss_d 1.0255  loss_g 0.7874  scale_g 32768  "
        "scale_d "
        "65536  skipped_g 3  skipped_d 0  sync 218.1 kB/step  rss 16.6/16.3 MB");
  // The scalers count every skip per part: the run's total is not said again.
  p.skipped_steps = 3;
  CHECK(progress_line(p).find("non-finite step(s)") == std::string::npos);
  // The scales go into metrics.jsonl exactly, beyond 6 significant digits.
  p.terms = {{"scale_g", std::ldexp(1.0, 40)}, {"scale_d", 0.5}, {"skipped_g", 3.0}};
  const std::string json = metrics_json(p);
  CHECK(json.find("\"scale_g\": 1099511627776, \"scale_d\": 0.5, \"skipped_g\": 3,") != std::string::npos);
}

TEST_CASE("a penalised run's terms follow the losses, on the console and in JSON", "[metrics]") {
  LogPoint p = ring8_point();
  p.terms = {{"gp", 0.125}, {"wdist", -1.5}};
  CHECK(progress_line(p) ==
        "iter     50/200  2000.0 it/s  0.5 ms/step  ETA 0s  loss_d 1.0255  loss_g 0.7874  gp 0.1250  wdist "
        "-1.5000  "
        "sync 218.1 kB/step  rss 16.6/16.3 MB");
  JsonValue v = JsonReader::parse(metrics_json(p));
  CHECK(keys(v) == std::set<std::string>{"iteration", "loss_d", "loss_g", "gp", "wdist", "ms_per_step",
                                         "bytes_per_step", "rss_mb"});
  CHECK(v.at("gp").number == 0.125);
  CHECK(v.at("wdist").number == -1.5);
}

TEST_CASE("a diverged run's line stays JSON: non-finite values are null", "[metrics]") {
  LogPoint p = ring8_point();
  p.loss_d = std::nan("");
  p.loss_g = INFINITY;
  p.terms = {{"gp", -INFINITY}, {"lr", 2e-4}};
  JsonValue v = JsonReader::parse(metrics_json(p));  // strict: "nan" or "inf" would throw
  CHECK(v.at("loss_d").kind == JsonValue::Kind::null);
  CHECK(v.at("loss_g").kind == JsonValue::Kind::null);
  CHECK(v.at("gp").kind == JsonValue::Kind::null);
  CHECK(v.at("lr").number == 2e-4);
  // And read back by the report and --resume as NaN.
  const auto parsed = training::parse_scalars_json(metrics_json(p));
  REQUIRE(parsed);
  CHECK(std::isnan(parsed->second[0].second));
}

TEST_CASE("a metrics line is a JSON object with the fields", "[metrics]") {
  // The reader is strict: what a careless writer might print does not pass.
  CHECK_THROWS(JsonReader::parse("{\"loss_d\": nan}"));
  CHECK_THROWS(JsonReader::parse("{\"iteration\": 1,}"));
  CHECK_THROWS(JsonReader::parse("{\"iteration\": 1} {}"));
  const std::string line = metrics_json(ring8_point());
  INFO(line);
  JsonValue v = JsonReader::parse(line);
  REQUIRE(v.kind == JsonValue::Kind::object);
  CHECK(keys(v) ==
        std::set<std::string>{"iteration", "loss_d", "loss_g", "ms_per_step", "bytes_per_step", "rss_mb"});
  CHECK(v.at("iteration").is_integer());
  CHECK(v.at("iteration").number == 50);
  CHECK(v.at("loss_d").number == Approx(1.0254731).epsilon(1e-5));  // 6 significant digits
  CHECK(v.at("loss_g").number == Approx(0.78742099).epsilon(1e-5));
  CHECK(v.at("ms_per_step").number == 0.5);
  CHECK(v.at("bytes_per_step").is_integer());
  CHECK(v.at("bytes_per_step").number == 218128);
  const JsonValue& rss = v.at("rss_mb");
  REQUIRE(rss.kind == JsonValue::Kind::array);
  REQUIRE(rss.items.size() == 2);
  CHECK(rss.items[0].number == Approx(16.6216));
  CHECK(rss.items[1].number == Approx(16.2775));
}

TEST_CASE("the ring8 quality and the sync summary lines", "[metrics]") {
  data::Ring8Quality q;
  q.modes_covered = 7;
  q.high_quality_fraction = 0.81234;
  q.count = 2500;
  CHECK(ring8_line(q) ==
        "ring8 quality: 7/8 modes covered, 81.2% high-quality samples (within 3 sigma of a mode, 2500 "
        "samples)");
  JsonValue v = JsonReader::parse(ring8_json(300, q));
  CHECK(keys(v) == std::set<std::string>{"iteration", "ring8_modes", "ring8_high_quality"});
  CHECK(v.at("iteration").number == 300);
  CHECK(v.at("ring8_modes").number == 7);
  CHECK(v.at("ring8_high_quality").number == Approx(0.81234));

  PhaseStats phase;
  phase.description = "phase 2: 12 of 12 parameters (generator, discriminator)";
  phase.bucket_bytes = {71200, 1048576, 3000};
  phase.bytes_per_backward = 1122776;
  phase.backwards = 50;
  phase.rebuilds = 1;
  CHECK(sync_phase_line(phase) ==
        "sync phase 2: 12 of 12 parameters (generator, discriminator): 3 bucket(s), largest 1.05 MB, 1.12 MB "
        "per "
        "backward, 50 backward(s), rebuilt 1x");
  CHECK(sync_buckets_line(2, 1122816, 1122776) ==
        "sync buckets: 2 phase(s) in 1.12 MB of buckets for 1.12 MB of parameters (1.00x)");
  CHECK(sync_buckets_line(9, 655360, 625000) ==
        "sync buckets: 9 phase(s) in 655.4 kB of buckets for 625.0 kB of parameters (1.05x)");
  CHECK(sync_buckets_line(0, 0, 0) ==
        "sync buckets: 0 phase(s) in 0.0 kB of buckets for 0.0 kB of parameters (-)");
}

TEST_CASE("the metrics log writes both, and a resumed run appends to its file", "[metrics]") {
  TempDir tmp("metrics");
  std::ostringstream console;
  LogPoint later = ring8_point();
  later.iteration = 100;
  data::Ring8Quality q;
  q.count = 2500;
  {
    MetricsLog log(tmp.path.string(), /*resume_iteration=*/0);
    CHECK(log.path() == tmp.file("metrics.jsonl"));
    log.log(ring8_point(), console);
    log.log(later, console);
    log.log_ring8(200, q, console);
    CHECK(lines_of(log.path()).size() == 3);  // flushed as written
  }
  CHECK(console.str() ==
        progress_line(ring8_point()) + "\n" + progress_line(later) + "\n" +
            "ring8 quality: 0/8 modes covered, 0.0% high-quality samples (within 3 sigma of a "
            "mode, 2500 samples)\n");
  std::vector<std::string> lines = lines_of(tmp.file("metrics.jsonl"));
  REQUIRE(lines.size() == 3);
  CHECK(JsonReader::parse(lines[0]).at("iteration").number == 50);
  CHECK(JsonReader::parse(lines[1]).at("iteration").number == 100);
  CHECK(JsonReader::parse(lines[2]).at("ring8_modes").number == 0);

  MetricsLog(tmp.path.string(), /*resume_iteration=*/200).log(ring8_point(), console);
  CHECK(lines_of(tmp.file("metrics.jsonl")).size() == 4);
  MetricsLog(tmp.path.string(), /*resume_iteration=*/0).log(ring8_point(), console);
  CHECK(lines_of(tmp.file("metrics.jsonl")).size() == 1);

  CHECK_THROWS_WITH(MetricsLog(tmp.file("missing"), 0),
                    Catch::Contains("cannot open " + tmp.file("missing") + "/metrics.jsonl for writing"));
}

TEST_CASE("a resumed run's metrics file is cut to the checkpoint's iteration, torn lines dropped",
          "[metrics][resume]") {
  TempDir tmp("metrics");
  data::Ring8Quality q;
  q.count = 2500;
  const std::string head = line_of(10) + line_of(20);
  // Lines after the checkpoint of iteration 20 (logged before a crash), a ring8 summary of
  // a finished run, a line torn mid-way that the next run appended to, a torn last line.
  write_bytes(tmp.file("metrics.jsonl"), head + line_of(30) + ring8_json(40, q) + "\n" +
                                             "{\"iteration\": 20, \"loss_d\": 0." + line_of(20) +
                                             "{\"iteration\": 40, \"loss_d\": 1.02");
  std::ostringstream console;
  {
    MetricsLog log(tmp.path.string(), /*resume_iteration=*/20);
    CHECK(read_bytes(log.path()) == head);  // cut before the first new line is written
    LogPoint p = ring8_point();
    p.iteration = 30;
    log.log(p, console);
  }
  CHECK(read_bytes(tmp.file("metrics.jsonl")) == head + line_of(30));
  CHECK_FALSE(std::filesystem::exists(tmp.file("metrics.jsonl.tmp")));

  // A summary line at the checkpoint's iteration stays; a whole last line without its
  // newline is kept and finished, so the next line does not run into it.
  write_bytes(tmp.file("metrics.jsonl"), head + ring8_json(20, q));
  MetricsLog(tmp.path.string(), /*resume_iteration=*/20).log(ring8_point(), console);
  CHECK(read_bytes(tmp.file("metrics.jsonl")) == head + ring8_json(20, q) + "\n" + line_of(50));

  // Resuming with no metrics file yet starts one.
  TempDir empty("metrics");
  MetricsLog(empty.path.string(), /*resume_iteration=*/20).log(ring8_point(), console);
  CHECK(read_bytes(empty.file("metrics.jsonl")) == line_of(50));
}

TEST_CASE("a metrics line that cannot be written is reported once, naming the file", "[metrics][errors]") {
  // A FIFO whose reader has gone takes the open and fails every write (EPIPE), as a full
  // disk fails them; SIGPIPE is ignored meanwhile, as a write error must not kill the test.
  TempDir tmp("metrics");
  REQUIRE(::mkfifo(tmp.file("metrics.jsonl").c_str(), 0600) == 0);
  const int reader = ::open(tmp.file("metrics.jsonl").c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  struct sigaction ignore {
  }, saved{};
  ignore.sa_handler = SIG_IGN;
  REQUIRE(::sigaction(SIGPIPE, &ignore, &saved) == 0);
  std::ostringstream console;
  {
    StderrCapture capture(tmp.file("stderr"));
    MetricsLog log(tmp.path.string(), /*resume_iteration=*/0);
    ::close(reader);
    log.log(ring8_point(), console);
    LogPoint later = ring8_point();
    later.iteration = 100;
    log.log(later, console);
  }
  ::sigaction(SIGPIPE, &saved, nullptr);
  CHECK(read_bytes(tmp.file("stderr")) ==
        "tandem-train: warning: cannot write " + tmp.file("metrics.jsonl") +
            " at iteration 50 (Broken pipe); no more metrics lines go there, training goes on\n");
  CHECK(console.str().find("iter    100/200") != std::string::npos);  // the run still reports

  // A cut that cannot be written (a directory holds the temporary's name) keeps the file as
  // it was, and says so.
  TempDir ro("metrics");
  write_bytes(ro.file("metrics.jsonl"), line_of(10) + line_of(20));
  std::filesystem::create_directory(ro.file("metrics.jsonl.tmp"));
  {
    StderrCapture capture(ro.file("stderr"));
    MetricsLog(ro.path.string(), /*resume_iteration=*/10).log(ring8_point(), console);
  }
  CHECK(read_bytes(ro.file("metrics.jsonl")) == line_of(10) + line_of(20));
  CHECK(read_bytes(ro.file("stderr")) ==
        "tandem-train: warning: cannot write " + ro.file("metrics.jsonl") +
            " at iteration 10 (cutting it to the checkpoint's iteration 10: cannot write " +
            ro.file("metrics.jsonl.tmp") +
            " (Is a directory)); no more metrics lines go there, training goes on\n");
}

TEST_CASE("a link planted at metrics.jsonl or its temporary is never written through", "[metrics][errors]") {
  TempDir tmp("metrics");
  write_bytes(tmp.file("precious"), "precious\n");
  std::ostringstream console;
  SECTION("at the file: refused by name, new run or resumed") {
    std::filesystem::create_symlink(tmp.file("precious"), tmp.file("metrics.jsonl"));
    for (int64_t resume : {0, 10})
      CHECK_THROWS_WITH(MetricsLog(tmp.path.string(), resume),
                        Catch::Contains("cannot open " + tmp.file("metrics.jsonl") +
                                        " for writing (it is a symbolic link, not written through)"));
    std::filesystem::remove(tmp.file("metrics.jsonl"));
    std::filesystem::create_symlink(tmp.file("absent"), tmp.file("metrics.jsonl"));  // dangling
    CHECK_THROWS(MetricsLog(tmp.path.string(), 0));
    CHECK_FALSE(std::filesystem::exists(tmp.file("absent")));
  }
  SECTION("at the temporary of a cut: the link is replaced, its target untouched") {
    write_bytes(tmp.file("metrics.jsonl"), line_of(10) + line_of(20));
    std::filesystem::create_symlink(tmp.file("precious"), tmp.file("metrics.jsonl.tmp"));
    MetricsLog(tmp.path.string(), /*resume_iteration=*/10).log(ring8_point(), console);
    CHECK(read_bytes(tmp.file("metrics.jsonl")) == line_of(10) + line_of(50));
    CHECK_FALSE(std::filesystem::is_symlink(tmp.file("metrics.jsonl")));
  }
  CHECK(read_bytes(tmp.file("precious")) == "precious\n");
}

TEST_CASE("the toolkit's parse_scalars_json reads tandem-train's lines", "[metrics]") {
  // tandem-train's line: the numbers, the rss array left out.
  LogPoint p;
  p.iteration = 20;
  p.loss_d = 1.5;
  p.loss_g = 0.25;
  p.terms = {{"gp", 0.125}};
  p.ms_per_step = 4;
  p.bytes_per_step = 1000;
  p.rss_mb = {1.5, 2.5};
  const auto train_line = training::parse_scalars_json(metrics_json(p));
  REQUIRE(train_line);
  CHECK(train_line->first == 20);
  CHECK(train_line->second ==
        training::Scalars{
            {"loss_d", 1.5}, {"loss_g", 0.25}, {"gp", 0.125}, {"ms_per_step", 4}, {"bytes_per_step", 1000}});
}
