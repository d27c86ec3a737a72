// The run report: chart points, smoothing, escaping and encoding against values worked out
// by hand, and the page's parts (refresh while running, the latest picture inline, the
// settings escaped, the phases) in the HTML a run writes.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>

#include "models/train/metrics_log.h"
#include "models/training/run_report.h"
#include "models/training/scalar_log.h"
#include "tests/test_files.h"

using namespace tandem;
using namespace tandem::models;
using namespace tandem::training;
using tandem::training::ScalarLog;
using namespace tandem::testing;

namespace {

// How many times `needle` occurs in `text`.
size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The points="..." of the polyline whose data-series is `series`.
std::string points_of(const std::string& html, const std::string& series) {
  const size_t at = html.find("<polyline data-series=\"" + series + "\"");
  REQUIRE(at != std::string::npos);
  const size_t begin = html.find("points=\"", at) + 8;
  return html.substr(begin, html.find('"', begin) - begin);
}

// The chart (figure) whose id is `id`.
std::string figure_of(const std::string& html, const std::string& id) {
  const size_t at = html.find("<figure class=\"chart\" id=\"" + id + "\"");
  REQUIRE(at != std::string::npos);
  return html.substr(at, html.find("</figure>", at) - at);
}

LogPoint point(int64_t iteration, double loss_d, double loss_g, double ms) {
  LogPoint p;
  p.iteration = iteration;
  p.total = 300;
  p.ms_per_step = ms;
  p.loss_d = loss_d;
  p.loss_g = loss_g;
  p.bytes_per_step = 1000.0 * static_cast<double>(iteration);
  p.rss_mb = {10.0, 11.0};
  return p;
}

}  // namespace

TEST_CASE("polyline points map data into the plot area, y upwards", "[run_report]") {
  // Plot area: x from 64 to 560 - 16 = 544, y from 12 (top) to 220 - 28 = 192 (bottom).
  const PlotRange range{.x_min = 100, .x_max = 300, .y_min = 0, .y_max = 2};
  CHECK(polyline_points({100, 200, 300}, {0, 2, 0.5}, range) == "64.0,192.0 304.0,12.0 544.0,147.0");
  // Non-finite values are left out.
  CHECK(polyline_points({100, 200, 300}, {1, std::nan(""), INFINITY}, range) == "64.0,102.0");
  CHECK(polyline_points({}, {}, range) == "");
}

TEST_CASE("smoothing is an exponential moving average over a tenth of the points", "[run_report]") {
  // Fewer than 20 points: span 1, weight 1, the values themselves.
  CHECK(smooth({3, 1, 2}) == std::vector<double>{3, 1, 2});
  // 20 points: span 2, weight 2/3.
  std::vector<double> values(20, 0.0);
  values[1] = 3.0;
  const std::vector<double> s = smooth(values);
  CHECK(s[0] == 0.0);
  CHECK(s[1] == Approx(2.0));
  CHECK(s[2] == Approx(2.0 / 3.0));
  CHECK(s[3] == Approx(2.0 / 9.0));
  // A NaN leaves the average as it was; a leading NaN has no average yet.
  const std::vector<double> gaps = smooth({std::nan(""), 1.0, std::nan(""), 2.0});
  CHECK(std::isnan(gaps[0]));
  CHECK(gaps[1] == 1.0);
  CHECK(gaps[2] == 1.0);
  CHECK(gaps[3] == 2.0);
}

TEST_CASE("html_escape and base64 against hand-worked values", "[run_report]") {
  CHECK(html_escape("a<b>&\"c'") == "a&lt;b&gt;&amp;&quot;c&#39;");
  CHECK(html_escape("plain") == "plain");
  CHECK(base64("") == "");
  CHECK(base64("f") == "Zg==");
  CHECK(base64("fo") == "Zm8=");
  CHECK(base64("foo") == "Zm9v");
  CHECK(base64("foobar") == "Zm9vYmFy");
  CHECK(base64(std::string("\xff\x00\x80", 3)) == "/wCA");
}

TEST_CASE("the report shows losses, speed, sync, samples and settings, and reloads while running",
          "[run_report]") {
  TempDir tmp("run_report");
  std::vector<ReportSetting> settings = {{.flag = "--lr", .value = "0.0002"},
                                         {.flag = "--out", .value = "runs/<a&b>"}};
  RunReport report(tmp.path.string(), "tandem-train: dcgan on fashion-mnist, 2 rank(s)", settings, 300);
  add_log_point(report, point(100, 1.0, 2.0, 50.0));
  add_log_point(report, point(200, 0.5, 3.0, 40.0));
  add_log_point(report, point(300, 0.0, 2.0, 25.0));
  write_bytes(tmp.file("samples-000100.png"), "first");
  write_bytes(tmp.file("samples-000300.png"), "foobar");
  report.add_sample(100, tmp.file("samples-000100.png"));
  report.add_sample(300, tmp.file("samples-000300.png"));
  PhaseStats phase;
  phase.description = "phase 1: 6 of 12 parameters (discriminator.*)";
  phase.bucket_bytes = {1000, 250000};
  phase.bytes_per_backward = 251000;
  phase.backwards = 300;
  phase.rebuilds = 1;
  phase.storage_bytes = 251008;
  phase.parameter_bytes = 251000;
  report.set_phases("#1", {phase});

  REQUIRE(report.write(RunState::running) == "");
  CHECK(report.path() == tmp.file("report.html"));
  CHECK_FALSE(std::filesystem::exists(tmp.file("report.html.tmp")));
  const std::string running = read_bytes(report.path());
  CHECK(count_of(running, "<meta http-equiv=\"refresh\" content=\"10\">") == 1);
  CHECK(count_of(running, "id=\"state\">running</span> iteration 300 of 300") == 1);

  // Losses: x 100..300, y 0..3 over both losses; raw and smoothed (3 points: the same).
  CHECK(points_of(running, "loss_d (raw)") == "64.0,132.0 304.0,162.0 544.0,192.0");
  CHECK(points_of(running, "loss_g (raw)") == "64.0,72.0 304.0,12.0 544.0,72.0");
  CHECK(points_of(running, "loss_g (smoothed)") == points_of(running, "loss_g (raw)"));
  // Step time 50..25 ms, so 20..40 it/s; bytes 100 kB..300 kB.
  CHECK(points_of(running, "ms/step") == "64.0,12.0 304.0,84.0 544.0,192.0");
  CHECK(points_of(running, "it/s") == "64.0,192.0 304.0,147.0 544.0,12.0");
  CHECK(points_of(running, "bytes/step") == "64.0,192.0 304.0,102.0 544.0,12.0");
  CHECK(count_of(running, "text-anchor=\"end\">100.0 kB</text>") == 1);  // the axis in bytes
  CHECK(count_of(running, "text-anchor=\"end\">300.0 kB</text>") == 1);
  CHECK(count_of(running, "<svg ") == 4);  // no penalty terms here: no chart of them
  // The x axis: iterations at its ends and quarters.
  for (const char* label : {">100</text>", ">150</text>", ">200</text>", ">250</text>", ">300</text>"})
    CHECK(count_of(running, label) == 4);

  // Phases: buckets, largest, bytes per backward, backwards, rebuilds.
  CHECK(count_of(running,
                 "<td>#1</td><td>phase 1: 6 of 12 parameters (discriminator.*)</td><td class=\"n\">2</td>"
                 "<td class=\"n\">250.0 kB</td><td class=\"n\">251.0 kB</td><td class=\"n\">300</td>"
                 "<td class=\"n\">1</td><td class=\"n\">1.00x</td>") == 1);
  // The latest picture inline, the earlier by name.
  CHECK(count_of(
            running,
            "id=\"latest-sample\" alt=\"samples at iteration 300\" src=\"data:image/png;base64,Zm9vYmFy\"") ==
        1);
  CHECK(count_of(running, "src=\"samples-000100.png\"") == 1);
  // Settings, escaped.
  CHECK(count_of(running, "<div><span class=\"flag\">--lr</span> 0.0002</div>") == 1);
  CHECK(count_of(running, "<div><span class=\"flag\">--out</span> runs/&lt;a&amp;b&gt;</div>") == 1);
  CHECK(count_of(running, "runs/<a") == 0);
  // The title, escaped too.
  CHECK(count_of(running, "<h1>tandem-train: dcgan on fashion-mnist, 2 rank(s)</h1>") == 1);
  // Self-contained: nothing fetched from elsewhere.
  CHECK(count_of(running, "://") == count_of(running, "xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(count_of(running, "<script") == 0);

  REQUIRE(report.write(RunState::finished) == "");
  const std::string finished = read_bytes(report.path());
  CHECK(count_of(finished, "http-equiv=\"refresh\"") == 0);
  CHECK(count_of(finished, "id=\"state\">finished</span>") == 1);
}

TEST_CASE("penalty terms get a chart of their own", "[run_report]") {
  TempDir tmp("run_report");
  RunReport report(tmp.path.string(), "t", {}, 20);
  LogPoint a = point(10, 1, 1, 1), b = point(20, 1, 1, 1);
  a.terms = {{"gp", 0.5}};
  b.terms = {{"gp", 1.5}};
  add_log_point(report, a);
  add_log_point(report, b);
  const std::string html = report.html(RunState::finished);
  CHECK(points_of(html, "gp (raw)") == "64.0,192.0 544.0,12.0");
  // A flat series (both losses 1): its value in the middle, +-10% around it on the axis.
  CHECK(points_of(html, "loss_d (raw)") == "64.0,102.0 544.0,102.0");
  CHECK(count_of(html, ">0.9</text>") == 2);  // the losses' chart and the step time's (1 ms)
  CHECK(count_of(html, ">1.1</text>") == 2);
  CHECK(count_of(html, "no sample picture yet") == 1);

  CHECK(count_of(html, "no synchronised backward yet") == 1);
}

TEST_CASE("axis labels have four digits, and whole numbers from 10^4 on", "[run_report]") {
  TempDir tmp("run_report");
  RunReport report(tmp.path.string(), "t", {}, 20);
  add_log_point(report, point(10, 0.61594, 1.4423, 15970.4));  // a step of 16 s on a busy machine
  add_log_point(report, point(20, 0.61594, 1.4423, 753.8));
  const std::string html = report.html(RunState::finished);
  for (const char* label : {">15970</text>", ">753.8</text>", ">0.6159</text>", ">1.442</text>"})
    CHECK(count_of(html, label) == 1);
  CHECK(count_of(html, "e+") == 0);
}

TEST_CASE("a report that cannot be written says why and leaves no temporary", "[run_report][errors]") {
  TempDir tmp("run_report");
  std::filesystem::create_directory(tmp.file("report.html"));  // a directory where it goes
  RunReport report(tmp.path.string(), "t", {}, 10);
  const std::string problem = report.write(RunState::running);
  CHECK_THAT(problem, Catch::StartsWith("cannot rename " + tmp.file("report.html.tmp") + " to " +
                                        tmp.file("report.html") + " ("));
  CHECK_FALSE(std::filesystem::exists(tmp.file("report.html.tmp")));
  CHECK_FALSE(report.warned());
  report.write_or_warn(RunState::running, "test: warning: no page");  // warns on stderr, once
  CHECK(report.warned());
  std::filesystem::remove(tmp.file("report.html"));
  report.write_or_warn(RunState::finished, "test: warning: no page");  // written now; still warned once
  CHECK(report.warned());
  CHECK(std::filesystem::is_regular_file(tmp.file("report.html")));
}

TEST_CASE("a resumed run's report starts with the history in --out up to its checkpoint", "[run_report]") {
  TempDir tmp("run_report");
  LogPoint a = point(10, 1.0, 2.0, 5.0), b = point(20, 3.0, 0.0, 4.0), beyond = point(30, 9.0, 9.0, 9.0);
  b.terms = {{"gp", 0.25}};
  // Lines as MetricsLog writes them, a ring8 line, a torn one, and one past the checkpoint.
  write_bytes(tmp.file("metrics.jsonl"),
              metrics_json(a) + "\n" + metrics_json(b) + "\n" +
                  "{\"iteration\": 20, \"ring8_modes\": 8, \"ring8_high_quality\": 0.5}\n" +
                  "{\"iteration\": 25, \"loss_d\": 1.0, \"lo\n" + metrics_json(beyond) + "\n");
  write_bytes(tmp.file("samples-000020.png"), "foo");
  write_bytes(tmp.file("samples-000010.png"), "first");
  write_bytes(tmp.file("samples-000030.png"), "later");
  write_bytes(tmp.file("samples-latest.png"), "not one of the run's");
  RunReport report(tmp.path.string(), "t", {}, 40);
  report.load_history(20);
  add_log_point(report, point(40, 2.0, 1.0, 3.0));  // the resumed run goes on from there
  const std::string html = report.html(RunState::running);
  // x 10..40, y 0..3.
  CHECK(points_of(html, "loss_d (raw)") == "64.0,132.0 224.0,12.0 544.0,72.0");
  CHECK(points_of(html, "loss_g (raw)") == "64.0,72.0 224.0,192.0 544.0,132.0");
  CHECK(points_of(html, "ms/step") == "64.0,12.0 224.0,102.0 544.0,192.0");
  CHECK(points_of(html, "gp (raw)") == "224.0,102.0");
  CHECK(count_of(html, "rss 10.0/11.0 MB") == 1);  // the progress line of the latest point
  CHECK(count_of(html,
                 "id=\"latest-sample\" alt=\"samples at iteration 20\" src=\"data:image/png;base64,Zm9v\"") ==
        1);
  CHECK(count_of(html, "src=\"samples-000010.png\"") == 1);
  CHECK(count_of(html, "samples-000030.png") == 0);
  CHECK(count_of(html, "samples-latest.png") == 0);
}

TEST_CASE("the report draws any names, grouped by prefix, lr on its own chart", "[run_report]") {
  TempDir tmp("scalar_log");
  {
    ScalarLog log(tmp.path.string());
    log.log(10, {{"loss_d", 1.0}, {"loss_g", 3.0}, {"lr", 1e-3}, {"acc/train", 0.5}, {"acc/test", 0.25}});
    log.log(20, {{"loss_d", 2.0}, {"loss_g", 0.0}, {"lr", 5e-4}, {"acc/train", 0.75}, {"acc/test", 0.5}});
    log.log(30, {{"loss_d", 1.5}, {"loss_g", 1.0}, {"lr", 2.5e-4}, {"acc/train", 1.0}, {"acc/test", 0.75}});
  }
  RunReport report(tmp.path.string(), "my gan", {}, 30);
  report.load_history(30);
  const std::string html = report.html(RunState::finished);
  // Three charts: the losses, the learning rate, the accuracies; no empty ones.
  CHECK(count_of(html, "<svg ") == 3);
  const std::string losses = figure_of(html, "losses"), lr = figure_of(html, "lr"),
                    acc = figure_of(html, "scalars-acc");
  // x 10..30; the losses share 0..3, the accuracies 0.25..1.
  CHECK(points_of(losses, "loss_d (raw)") == "64.0,132.0 304.0,72.0 544.0,102.0");
  CHECK(points_of(losses, "loss_g (raw)") == "64.0,12.0 304.0,192.0 544.0,132.0");
  CHECK(points_of(acc, "acc/test (raw)") == "64.0,192.0 304.0,132.0 544.0,72.0");
  CHECK(count_of(acc, "data-series=\"acc/train (smoothed)\"") == 1);
  // lr alone, unsmoothed, and on no other chart.
  CHECK(points_of(lr, "lr") == "64.0,12.0 304.0,132.0 544.0,192.0");
  CHECK(count_of(losses + acc, "lr") == 0);
  // The latest line: the scalars, no empty rss figure.
  CHECK(count_of(html,
                 "<pre id=\"latest\">iter     30/30  loss_d 1.5000  loss_g 1.0000  lr 0.00025  acc/train "
                 "1.0000  acc/test 0.7500</pre>") == 1);
  CHECK(count_of(html, "rss") == 0);
}

TEST_CASE("tandem-train's lr goes on its own chart, not the penalty terms'", "[run_report]") {
  TempDir tmp("scalar_log");
  RunReport report(tmp.path.string(), "t", {}, 20);
  for (int64_t i : {10, 20}) {
    LogPoint p;
    p.iteration = i;
    p.total = 20;
    p.ms_per_step = 2;
    p.terms = {
        {"lr", 1e-4 * static_cast<double>(i)}, {"gp", 0.5}, {"grad_norm_d", 1.0}, {"grad_norm_g", 2.0}};
    add_log_point(report, p);
  }
  const std::string html = report.html(RunState::finished);
  CHECK(count_of(figure_of(html, "terms"), "data-series=\"lr") == 0);
  CHECK(count_of(figure_of(html, "terms"), "data-series=\"gp (raw)\"") == 1);
  CHECK(points_of(figure_of(html, "lr"), "lr") == "64.0,192.0 544.0,12.0");
  CHECK(count_of(figure_of(html, "scalars-grad-norm"), "data-series=\"grad_norm_g (raw)\"") == 1);
  // losses, lr, terms, grad_norm, step time, it/s, bytes
  CHECK(count_of(html, "<svg ") == 7);
  // No rss figures in the point: none in the latest line either.
  CHECK(count_of(html, "rss") == 0);
}
